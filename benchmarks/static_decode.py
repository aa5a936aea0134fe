"""The static decode step (``generation.static_decode``), eager and compiled, against today's dynamic decoding.

Greedy, batch 1, the prompt and length of ``benchmarks.generation``. The compiled decoder is made and
compiled once (its first call timed alone, as ``compile_s``), then reused: each call prefills from slot 0.
``tokens_per_s`` is per call, with each call's fixed costs (``generate`` checks every weight is finite);
``step_tokens_per_s`` takes a one-token call's time off, leaving the decode steps alone.
"""

from __future__ import annotations

import time

import torch
import torch._inductor.config

import blockspec
from benchmarks.cases import Case
from benchmarks.generation import NEW_TOKENS, PROMPT_TOKENS
from benchmarks.timing import interleave, paired_ratio
from blockspec.generation.static_decode import StaticDecoder, greedy
from blockspec.generation.tokens import generate


def compare(case: Case, registry: blockspec.Registry, rounds: int) -> dict[str, object]:
    """Tokens per second of the three, interleaved; the compiled one on the default backend (inductor)."""
    spec = case.spec(registry)
    model = blockspec.build(spec, registry=registry, seed=0).eval()
    prompt = torch.randint(1, spec.model.vocab_size, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(0))
    length = PROMPT_TOKENS + NEW_TOKENS
    torch._dynamo.reset()
    with torch.inference_mode():
        eager = StaticDecoder(model, batch_size=1, max_length=length)
        compiled = StaticDecoder(model, batch_size=1, max_length=length, compile=True)
        with torch._inductor.config.patch(force_disable_caches=True):  # a cold compile, every run
            begin = time.perf_counter()
            first = greedy(compiled, prompt, NEW_TOKENS)
            compile_s = time.perf_counter() - begin
        runs = {"dynamic": lambda n: generate(model, prompt, max_new_tokens=n, temperature=0.0)[:, PROMPT_TOKENS:],
                "static_eager": lambda n: greedy(eager, prompt, n),
                "static_compiled": lambda n: greedy(compiled, prompt, n)}
        same = all(torch.equal(run(NEW_TOKENS), first) for run in runs.values())
        contenders = {f"{name}{suffix}": (lambda run=run, n=n: run(n))
                      for name, run in runs.items() for suffix, n in (("", NEW_TOKENS), ("_first", 1))}
        timings = interleave(contenders, rounds=rounds, warmup=1)
    return {
        "status": "measured", "same_tokens": same, "new_tokens": NEW_TOKENS, "prompt_tokens": PROMPT_TOKENS,
        "compile_s": compile_s, "tokens_per_s": {name: NEW_TOKENS / timings[name].median for name in runs},
        "step_tokens_per_s": {name: (NEW_TOKENS - 1) / (timings[name].median - timings[f"{name}_first"].median)
                              for name in runs},
        "timings": {name: t.as_dict() for name, t in timings.items()},
        "compiled_over_dynamic_paired": paired_ratio(timings["static_compiled"], timings["dynamic"]),
    }
