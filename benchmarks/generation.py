"""KV-cache generation: blockspec's cached greedy decoding versus Hugging Face ``generate``, same weights."""

from __future__ import annotations

import importlib.util

import torch

import blockspec
from benchmarks.cases import Case
from benchmarks.peers import build_hf
from benchmarks.timing import interleave, paired_ratio

PROMPT_TOKENS = 16
NEW_TOKENS = 48  # prompt + new tokens fit the tiny model's 64-position table
RAGGED_LENGTHS = (3, 5, 8, 11, 14, 17, 20, 24)  # a ragged batch: 8 prompts, each of its own length
RAGGED_NEW_TOKENS = 32  # the longest prompt + these fit the tiny model's 64 positions: the cached path throughout


def hf_greedy(model: torch.nn.Module, prompt: torch.Tensor, n_new: int) -> torch.Tensor:
    """HF's own loop with its KV cache; min_new_tokens keeps it from stopping early."""
    return model.generate(prompt, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False,
                          use_cache=True, pad_token_id=0)


def blockspec_greedy_fn():
    """blockspec's cached greedy generation, or None while the KV cache has not landed."""
    if importlib.util.find_spec("blockspec.generation.tokens") is None:
        return None
    from blockspec.generation.tokens import generate  # the KV cache of the training issue

    def greedy(model: torch.nn.Module, prompt: torch.Tensor, n_new: int) -> torch.Tensor:
        return generate(model, prompt, max_new_tokens=n_new, temperature=0.0)

    return greedy


def compare(case: Case, registry: blockspec.Registry, rounds: int) -> dict[str, object]:
    """Tokens per second of greedy generation, batch 1, interleaved."""
    greedy = blockspec_greedy_fn()
    if greedy is None:
        return {"status": "pending", "reason": "blockspec.generation.tokens (the KV cache, issue 6) is not on main yet"}
    spec = case.spec(registry)
    model = blockspec.build(spec, registry=registry, seed=0).eval()
    hf = build_hf(spec, case.hf_family, model)
    prompt = torch.randint(1, spec.model.vocab_size, (1, PROMPT_TOKENS))
    with torch.no_grad():
        same = torch.equal(greedy(model, prompt, NEW_TOKENS)[..., -NEW_TOKENS:],
                           hf_greedy(hf, prompt, NEW_TOKENS)[..., -NEW_TOKENS:])
        timings = interleave({"blockspec": lambda: greedy(model, prompt, NEW_TOKENS),
                              "hf": lambda: hf_greedy(hf, prompt, NEW_TOKENS)}, rounds=rounds, warmup=1)
    return {
        "ragged": ragged(model, spec.model.vocab_size, rounds),
        "status": "measured", "same_tokens": same, "new_tokens": NEW_TOKENS, "prompt_tokens": PROMPT_TOKENS,
        "tokens_per_s": {name: NEW_TOKENS / t.median for name, t in timings.items()},
        "timings": {name: t.as_dict() for name, t in timings.items()},
        "time_ratio": timings["blockspec"].median / timings["hf"].median,
        "time_ratio_paired": paired_ratio(timings["blockspec"], timings["hf"]),
    }


def ragged(model: torch.nn.Module, vocab_size: int, rounds: int) -> dict[str, object]:
    """A ragged batch of 8 prompts in one call against the same 8 generated one by one, greedy, same weights."""
    from blockspec.generation.tokens import generate

    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, vocab_size, (n,), generator=generator).tolist() for n in RAGGED_LENGTHS]

    def batched() -> list[list[int]]:
        rows = generate(model, prompts, max_new_tokens=RAGGED_NEW_TOKENS, temperature=0.0)
        return [row.tolist() for row in rows]

    def one_by_one() -> list[list[int]]:
        return [generate(model, torch.tensor([p]), max_new_tokens=RAGGED_NEW_TOKENS, temperature=0.0)[0].tolist()
                for p in prompts]

    with torch.no_grad():
        same = batched() == one_by_one()
        timings = interleave({"ragged": batched, "one_by_one": one_by_one}, rounds=rounds, warmup=1)
    return {
        "prompt_lengths": list(RAGGED_LENGTHS), "new_tokens": RAGGED_NEW_TOKENS, "same_tokens": same,
        "timings": {name: t.as_dict() for name, t in timings.items()},
        "speedup": timings["one_by_one"].median / timings["ragged"].median,
        "speedup_paired": paired_ratio(timings["one_by_one"], timings["ragged"]),
    }
