"""Autoregressive sampling from a language model, with or without a KV cache."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from blockspec.errors import ContextLengthError
from blockspec.modules.kv_cache import KVCache
from blockspec.modules.transformer import Transformer


def generate(
    model: Transformer,
    ids: torch.Tensor,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    use_cache: bool = True,
) -> torch.Tensor:
    """ids (B, N) -> (B, N + max_new_tokens): the prompt followed by sampled tokens.

    ``temperature`` 0 is greedy decoding. The cache only saves work: cached and
    uncached decoding compute the same logits, so greedy outputs are identical.
    """
    _check_request(model, ids, max_new_tokens, temperature, top_k)
    generator = None if seed is None else torch.Generator(ids.device).manual_seed(seed)
    with _eval_mode(model), torch.inference_mode():
        batch, n_prompt = ids.shape
        cache = KVCache.for_model(model, batch_size=batch, max_length=n_prompt + max_new_tokens) if use_cache else None
        tokens, step_input, start = ids, ids, 0
        last_only = _positionwise_head(model)
        for _ in range(max_new_tokens):
            logits = model(step_input, start=start, cache=cache, last_only=last_only)[:, -1]  # (B, |V|)
            token = sample(logits, temperature=temperature, top_k=top_k, generator=generator)  # (B, 1)
            tokens = torch.cat((tokens, token), dim=1)  # (B, N + t)
            if cache is None:
                step_input = tokens  # recompute the whole prefix
            else:
                step_input, start = token, tokens.shape[1] - 1  # only the new token, at its position
    return tokens


def sample(
    logits: torch.Tensor, *, temperature: float, top_k: int | None = None, generator: torch.Generator | None = None
) -> torch.Tensor:
    """logits (B, |V|) -> token ids (B, 1); temperature 0 takes the most likely token."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)


def _check_request(model: Transformer, ids: torch.Tensor, max_new_tokens: int, temperature: float,
                   top_k: int | None) -> None:
    """Refuse bad arguments, and positions a learned table cannot hold, before any kernel runs."""
    if ids.ndim != 2 or ids.shape[1] == 0:
        raise ValueError(f"expected prompt ids of shape (B, N) with N >= 1, found {tuple(ids.shape)}")
    if max_new_tokens < 0 or temperature < 0 or (top_k is not None and top_k < 1):
        raise ValueError(f"expected max_new_tokens >= 0, temperature >= 0, top_k >= 1; found "
                         f"{max_new_tokens}, {temperature}, {top_k}")
    limit = model.positional.max_positions
    end = ids.shape[1] + max_new_tokens
    if limit is not None and end > limit:
        raise ContextLengthError(
            f"a prompt of {ids.shape[1]} tokens plus {max_new_tokens} new ones needs positions up to {end - 1}, "
            f"but {type(model.positional).__name__} holds positions 0..{limit - 1} (context_length = {limit}); "
            f"ask for at most {max(limit - ids.shape[1], 0)} new tokens, or use sinusoidal/rope positions"
        )


def _positionwise_head(model: Transformer) -> bool:
    """Whether the head may see the last position alone: an "lm" head, which the conformance kit checks."""
    head = getattr(model, "provenance", {}).get("head")
    return head is not None and "lm" in head.promises


@contextmanager
def _eval_mode(model: torch.nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
