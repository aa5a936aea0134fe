"""Autoregressive sampling from a language model, with or without a KV cache."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

import torch
from attrs import define

from blockspec.assembly.memory import check_fits, generation_estimate
from blockspec.errors import ContextLengthError, Problem
from blockspec.modules.kv_cache import KVCache
from blockspec.modules.transformer import Transformer
from blockspec.modules.token_ids import check_token_ids
from blockspec.train.finite import check_finite_weights, non_finite_logits
from blockspec.generation.bounds import check_generation_arguments
from blockspec.generation.stopping import StopConditions


def generate(
    model: Transformer,
    ids: torch.Tensor,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    use_cache: bool = True,
    overflow: Literal["slide", "error"] = "slide",
    vocab_limit: int | None = None,
    source: str = "the model",
    memory_check: bool = True,
    stop_ids: Sequence[int] = (),
    stop_strings: Sequence[str] = (),
    decode: Callable[[list[int]], str] | None = None,
) -> torch.Tensor:
    """ids (B, N) -> (B, N + T): the prompt followed by T <= max_new_tokens sampled tokens.

    ``generate_stream``'s steps joined: the run ends early when every row has met a stop (an id in
    ``stop_ids``, or a text in ``stop_strings``, matched on ``decode`` of the row's new tokens; see
    ``generation.stopping``). A row that stops first is padded with the first stop id (else its last token).

    ``temperature`` 0 is greedy decoding. The cache only saves work: cached and
    uncached decoding compute the same logits, so greedy outputs are identical.

    A positional encoder with a bounded table (learned positions: ``max_positions`` =
    context_length) cannot see past it. ``overflow="slide"`` (the default) then conditions
    each step on the last ``max_positions`` tokens, as nanoGPT does: the cache serves while
    the sequence fits, after which every step recomputes the cropped window without it (a
    slid window starts at position 0, so cached keys would sit at the wrong positions).
    ``overflow="error"`` refuses such a request up front with ContextLengthError. Unbounded
    encoders (sinusoidal, RoPE: ``max_positions`` None) never slide: they keep the whole
    sequence in the cache, past the training context, under either setting.

    ``vocab_limit`` samples only ids below it: a tokenizer can know fewer tokens than the
    model's vocabulary (65 characters in a 128-entry embedding), and an id it cannot decode
    must never be drawn.

    Weights that hold NaN or Inf are refused before the first step, logits that come out NaN or Inf
    after the last (NonFiniteError naming ``source``): checking each step would wait on the device.

    ``memory_check`` refuses, before the cache is made, a request whose cache and working tensors the
    device cannot hold (``blockspec.assembly.memory``); False tries anyway.
    """
    steps = generate_stream(model, ids, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                            seed=seed, use_cache=use_cache, overflow=overflow, vocab_limit=vocab_limit, source=source,
                            memory_check=memory_check, stop_ids=stop_ids, stop_strings=stop_strings, decode=decode)
    return torch.cat((ids, *(token[:, None] for token in steps)), dim=1)  # (B, N) + T x (B, 1) -> (B, N + T)


def generate_stream(
    model: Transformer,
    ids: torch.Tensor,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    use_cache: bool = True,
    overflow: Literal["slide", "error"] = "slide",
    vocab_limit: int | None = None,
    source: str = "the model",
    memory_check: bool = True,
    stop_ids: Sequence[int] = (),
    stop_strings: Sequence[str] = (),
    decode: Callable[[list[int]], str] | None = None,
) -> Iterator[torch.Tensor]:
    """``generate``'s steps, each the new tokens (B,) as sampled; the same arguments, checked before it returns.

    Between steps the model stays in eval mode (restored when the stream ends or is closed); inference mode
    holds only while a step runs.
    """
    check_request(model, ids, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, overflow=overflow,
                  seed=seed, vocab_limit=vocab_limit)
    stops = StopConditions(ids.shape[0], stop_ids=stop_ids, stop_strings=stop_strings, decode=decode,
                           device=ids.device)
    window = model.positional.max_positions  # None: unbounded, the whole sequence is always the input
    batch, n_prompt = ids.shape
    cached = use_cache and (window is None or n_prompt <= window)
    length = n_prompt + max_new_tokens if window is None else min(n_prompt + max_new_tokens, window)
    if memory_check:  # first: the estimate reads no weight
        _check_memory(model, ids, length, cached=cached, new_tokens=max_new_tokens)
    check_finite_weights(model, source=source)
    cache = KVCache.for_model(model, batch_size=batch, max_length=length) if cached else None
    generator = None if seed is None else torch.Generator(ids.device).manual_seed(seed)
    settings = _Settings(temperature=temperature, top_k=top_k, vocab_limit=vocab_limit, generator=generator,
                         window=window, source=source)
    return _steps(model, ids, cache, stops, settings, max_new_tokens)


@define(kw_only=True)
class _Settings:
    """What every step of one run reads."""

    temperature: float
    top_k: int | None
    vocab_limit: int | None
    generator: torch.Generator | None
    window: int | None
    source: str


def _steps(model: Transformer, ids: torch.Tensor, cache: KVCache | None, stops: StopConditions, settings: _Settings,
           max_new_tokens: int) -> Iterator[torch.Tensor]:
    """The decoding loop: one (B,) per step until ``max_new_tokens`` or every row stops."""
    finite = torch.ones((), dtype=torch.bool, device=ids.device)  # every step's logits so far
    temperature, top_k, generator, window = settings.temperature, settings.top_k, settings.generator, settings.window
    tokens, step_input, start = ids, _cropped(ids, window), 0
    last_only = _positionwise_head(model)
    with eval_mode(model):
        for _ in range(max_new_tokens):
            with torch.inference_mode():
                logits = model(step_input, start=start, cache=cache, last_only=last_only)
                logits = logits[:, -1, :settings.vocab_limit]  # (B, T, V) -> (B, |V|)
                step_finite = torch.isfinite(logits).all()
                finite &= step_finite
                logits = torch.where(step_finite, logits, 0.0)  # sampling must not fail on NaN: the end refuses them
                token = sample(logits, temperature=temperature, top_k=top_k, generator=generator)  # (B, 1)
                if stops.active:  # nothing to check otherwise: the loop runs as before
                    token = stops.step(token[:, 0])[:, None]  # (B,) -> (B, 1): finished rows repeat their pad
                tokens = torch.cat((tokens, token), dim=1)  # (B, N + t)
                if cache is not None and (window is None or tokens.shape[1] <= window):
                    step_input, start = token, tokens.shape[1] - 1  # only the new token, at its position
                else:
                    cache, step_input, start = None, _cropped(tokens, window), 0  # recompute the (last) window
            yield token[:, 0].clone()  # (B,): a plain tensor outside inference mode
            if stops.active and stops.all_finished():
                break
    if not bool(finite):
        raise non_finite_logits(settings.source)


def _check_memory(model: Transformer, ids: torch.Tensor, length: int, *, cached: bool, new_tokens: int) -> None:
    """Refuse before the cache is made what the device cannot hold; uncached, each step recomputes the window."""
    batch, n_prompt = ids.shape
    estimate = generation_estimate(model, batch=batch, queries=n_prompt if cached else length, length=length,
                                   cached=cached)
    check_fits(estimate, ids.device, doing=f"generating {new_tokens:,} tokens", source=model.spec.source)


def _cropped(tokens: torch.Tensor, window: int | None) -> torch.Tensor:
    """The last ``window`` positions of (B, T) tokens; all of them when unbounded."""
    return tokens if window is None else tokens[:, -window:]


def sample(
    logits: torch.Tensor, *, temperature: float, top_k: int | None = None, generator: torch.Generator | None = None
) -> torch.Tensor:
    """logits (B, |V|) -> token ids (B, 1); temperature 0 takes the most likely token.

    The temperature divides each logit's distance from the largest, never the logit itself: the
    distances are <= 0 and the largest stays 0, so however small the temperature (1e-40 is a float32
    subnormal, 1e-300 rounds to 0) nothing overflows to inf and the softmax cannot be NaN. A tiny
    temperature is then what its limit is: every draw among the likeliest tokens, i.e. greedy.
    """
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float()
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    below = logits - logits.amax(dim=-1, keepdim=True)  # (B, |V|): <= 0, the likeliest at 0
    scaled = torch.where(below == 0, 0.0, below / temperature)  # 0/0 (a temperature that rounds to 0) is no NaN
    return torch.multinomial(scaled.softmax(dim=-1), 1, generator=generator)


def check_request(model: Transformer, ids: torch.Tensor, *, max_new_tokens: int, temperature: float = 1.0,
                  top_k: int | None = None, overflow: str = "slide", seed: int | None = None,
                  vocab_limit: int | None = None) -> None:
    """``generate``'s own checks, which it makes before any kernel runs: bad arguments (``generation_bounds``),
    and (overflow="error") positions a learned table cannot hold. A caller with several requests asks them
    all before it generates the first."""
    check_token_ids(ids, min_length=1)
    check_generation_arguments(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, seed=seed,
                               overflow=overflow, vocab_limit=vocab_limit, vocab_size=model.embedding.num_embeddings)
    limit = model.positional.max_positions
    n_prompt = ids.shape[1]
    end = n_prompt + max_new_tokens
    if overflow == "error" and limit is not None and end > limit:
        room = limit - n_prompt
        fix = (f"ask for at most {room} new tokens" if room > 0 else
               f"the prompt is too long: shorten it to at most {limit - 1} tokens")
        raise ContextLengthError(Problem(
            message=f"a prompt of {n_prompt} tokens plus {max_new_tokens} new ones needs positions up to {end - 1}, "
                    f"but {type(model.positional).__name__} holds positions 0..{limit - 1} (context_length = {limit})",
            hint=f"{fix}, let generation slide over the last {limit} tokens ({{overflow}}), "
                 "or use sinusoidal/rope positions",
            names={"overflow": 'overflow="slide"'}))


def _positionwise_head(model: Transformer) -> bool:
    """Whether the head may see the last position alone: an "lm" head, which the conformance kit checks."""
    head = getattr(model, "provenance", {}).get("head")
    return head is not None and "lm" in head.promises


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """``model`` in eval mode inside the block (no dropout), in its own mode again after."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
