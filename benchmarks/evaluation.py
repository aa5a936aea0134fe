"""`blockspec eval`'s scoring against a bare batched forward pass over the same windows, in the same run.

Both take the same model, windows and batch size; the bare pass only calls the model on windows made
beforehand, so the ratio is what reading, tokenising, windowing and summing the loss cost on top.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

import blockspec
from benchmarks.cases import Case
from benchmarks.timing import interleave, paired_ratio
from blockspec.data.tokenizer import CharTokenizer
from blockspec.evaluate.windows import batches

TOKENS = 16_384  # scored per round: windows of the case's length, enough that per-call costs are amortised
BATCH = 8
TARGET = 0.9  # eval's tokens/s over the bare pass's


def compare(case: Case, registry: blockspec.Registry, rounds: int) -> dict[str, object]:
    """Tokens per second scored by ``evaluate_text`` and by the bare pass, interleaved; stride = context."""
    spec = case.spec(registry)
    model = blockspec.build(spec, registry=registry, seed=0).eval()
    context, vocab = min(spec.model.context_length, case.tokens), min(spec.model.vocab_size, 65)
    tokenizer = CharTokenizer("".join(chr(0x41 + i) for i in range(vocab)))
    ids = np.random.default_rng(0).integers(0, vocab, TOKENS + 1)  # TOKENS // context full windows
    inputs = [torch.from_numpy(batch.ids[:, :-1].copy())  # (B, T + 1) -> (B, T): the inputs alone
              for batch in batches([ids], context=context, stride=context, size=BATCH)]
    with tempfile.TemporaryDirectory() as folder:
        text = Path(folder) / "held-out.txt"
        text.write_text(tokenizer.decode(ids.tolist()), encoding="utf-8")
        timings = interleave({
            "eval": lambda: blockspec.evaluate_text(model, text, context=context, stride=context, batch_size=BATCH,
                                                    tokenizer=tokenizer),
            "bare": lambda: _bare(model, inputs)}, rounds=rounds, warmup=1)
    tokens = TOKENS
    tps = {name: tokens / t.median for name, t in timings.items()}
    return {"status": "measured", "tokens": tokens, "context": context, "batch": BATCH, "tokens_per_s": tps,
            "ratio": tps["eval"] / tps["bare"], "ratio_paired": 1 / paired_ratio(timings["eval"], timings["bare"]),
            "target": TARGET, "timings": {name: t.as_dict() for name, t in timings.items()}}


def _bare(model: torch.nn.Module, inputs: list[torch.Tensor]) -> None:
    with torch.inference_mode():
        for batch in inputs:
            model(batch)  # (B, T, |V|)
