"""Autoregressive sampling from a language model, with or without a KV cache."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

import torch
from attrs import define

from blockspec.assembly.memory import check_fits, generation_estimate
from blockspec.errors import ContextLengthError, InputError, Problem
from blockspec.modules.kv_cache import KVCache
from blockspec.modules.transformer import Transformer
from blockspec.modules.token_ids import check_token_ids
from blockspec.train.finite import check_finite_weights, non_finite_logits
from blockspec.generation.bounds import check_generation_arguments
from blockspec.generation.ragged import Prompts, interleaved, pack, runs
from blockspec.generation.processors import (TokenCounts, min_p_filtered, presence_frequency_penalized,
                                             repetition_penalized, temperature_scaled, top_k_filtered, top_p_filtered)
from blockspec.generation.stopping import StopConditions


def generate(
    model: Transformer,
    ids: torch.Tensor | Prompts,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    repetition_penalty: float | None = None,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    seed: int | None = None,
    use_cache: bool = True,
    overflow: Literal["slide", "error"] = "slide",
    vocab_limit: int | None = None,
    source: str = "the model",
    memory_check: bool = True,
    stop_ids: Sequence[int] = (),
    stop_strings: Sequence[str] = (),
    decode: Callable[[list[int]], str] | None = None,
) -> torch.Tensor | list[torch.Tensor]:
    """ids (B, N) -> (B, N + T): the prompt followed by T <= max_new_tokens sampled tokens.

    A list of prompts of any lengths (each a list or 1-D tensor of ids) -> a list of (N_r + T,), one per
    prompt: a ragged batch (``generate_stream``), each row as that prompt alone would give.

    ``generate_stream``'s steps joined: the run ends early when every row has met a stop (an id in
    ``stop_ids``, or a text in ``stop_strings``, matched on ``decode`` of the row's new tokens; see
    ``generation.stopping``). A row that stops first is padded with the first stop id (else its last token).

    ``temperature`` 0 is greedy decoding (the argmax after the penalties). ``top_p``, ``min_p``,
    ``repetition_penalty``, ``presence_penalty`` and ``frequency_penalty`` are ``sample``'s, off by
    default; the counts the penalties read are kept step by step (``TokenCounts``). The cache only saves work: cached and
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
                            top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
                            frequency_penalty=frequency_penalty, seed=seed, use_cache=use_cache, overflow=overflow, vocab_limit=vocab_limit, source=source,
                            memory_check=memory_check, stop_ids=stop_ids, stop_strings=stop_strings, decode=decode)
    if not isinstance(ids, torch.Tensor):
        new = torch.stack(list(steps), dim=1)  # T x (B,) -> (B, T)
        return [torch.cat((torch.as_tensor(prompt, device=new.device), row)) for prompt, row in zip(ids, new)]
    return torch.cat((ids, *(token[:, None] for token in steps)), dim=1)  # (B, N) + T x (B, 1) -> (B, N + T)


def generate_stream(
    model: Transformer,
    ids: torch.Tensor | Prompts,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    repetition_penalty: float | None = None,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
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

    Ragged batches: ``ids`` may be a list of prompts of different lengths. They are left-padded into one
    batch whose KV cache carries each row's padding (``generation.ragged``); each row's tokens are those
    of that prompt alone, and under a ``seed`` row r draws from its own generator seeded seed + r (row 0
    as a solo run with ``seed``). Where the cache cannot serve (``use_cache=False``, or a learned table the
    longest row would slide past) runs of consecutive prompts of one length are decoded as batches of their
    own, their steps interleaved: the same tokens, slower.
    """
    ids, padding = (ids, None) if isinstance(ids, torch.Tensor) else pack(ids, device=_device_of(model))
    check_request(model, ids, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                  min_p=min_p, repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
                  frequency_penalty=frequency_penalty, overflow=overflow, seed=seed, vocab_limit=vocab_limit)
    stops = StopConditions(ids.shape[0], stop_ids=stop_ids, stop_strings=stop_strings, decode=decode,
                           device=ids.device)
    window = model.positional.max_positions  # None: unbounded, the whole sequence is always the input
    batch, n_prompt = ids.shape
    cached = use_cache and (window is None or n_prompt <= window)
    if padding is not None and not (use_cache and (window is None or n_prompt + max_new_tokens <= window)):
        options = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                       min_p=min_p, repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
                       frequency_penalty=frequency_penalty, use_cache=use_cache, overflow=overflow,
                       vocab_limit=vocab_limit, source=source, memory_check=memory_check, stop_ids=stop_ids,
                       stop_strings=stop_strings, decode=decode)
        return interleaved([(rows, generate_stream(model, ids[rows.start:rows.stop, int(padding[rows.start]):],
                                                   seed=None if seed is None else row_seed(seed, rows.start), **options))
                            for rows in runs(padding)], batch, stop_ids[0] if stop_ids else None)
    length = n_prompt + max_new_tokens if window is None else min(n_prompt + max_new_tokens, window)
    if memory_check:  # first: the estimate reads no weight
        _check_memory(model, ids, length, cached=cached, new_tokens=max_new_tokens)
    check_finite_weights(model, source=source)
    cache = KVCache.for_model(model, batch_size=batch, max_length=length, padding=padding) if cached else None
    generator = None if seed is None else [torch.Generator(ids.device).manual_seed(row_seed(seed, r))
                                           for r in range(batch)]
    settings = _Settings(filters=dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                      repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
                                      frequency_penalty=frequency_penalty),
                         vocab_limit=vocab_limit, generator=generator, window=window, source=source)
    return _steps(model, ids, cache, stops, settings, max_new_tokens)


@define(kw_only=True)
class _Settings:
    """What every step of one run reads."""

    filters: dict[str, float | int | None]  # ``sample``'s keywords: temperature, top-k, top-p, min-p, penalties
    vocab_limit: int | None
    generator: Sequence[torch.Generator] | None  # one per row
    window: int | None
    source: str


def _steps(model: Transformer, ids: torch.Tensor, cache: KVCache | None, stops: StopConditions, settings: _Settings,
           max_new_tokens: int) -> Iterator[torch.Tensor]:
    """The decoding loop: one (B,) per step until ``max_new_tokens`` or every row stops."""
    finite = torch.ones((), dtype=torch.bool, device=ids.device)  # every step's logits so far
    generator, window = settings.generator, settings.window
    tokens, step_input, start = ids, _cropped(ids, window), 0
    last_only = _positionwise_head(model)
    counts = TokenCounts.start(ids, settings.vocab_limit or model.embedding.num_embeddings,  # what the penalties read
                               padding=None if cache is None else cache.padding)
    with eval_mode(model):
        for _ in range(max_new_tokens):
            with torch.inference_mode():
                logits = model(step_input, start=start, cache=cache, last_only=last_only)
                logits = logits[:, -1, :settings.vocab_limit]  # (B, T, V) -> (B, |V|)
                step_finite = torch.isfinite(logits).all()
                finite &= step_finite
                logits = torch.where(step_finite, logits, 0.0)  # sampling must not fail on NaN: the end refuses them
                token = sample(logits, **settings.filters, counts=counts, generator=generator)  # (B, 1)
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
    logits: torch.Tensor, *, temperature: float, top_k: int | None = None, top_p: float | None = None,
    min_p: float | None = None, repetition_penalty: float | None = None, presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0, counts: TokenCounts | None = None,
    generator: torch.Generator | Sequence[torch.Generator] | None = None
) -> torch.Tensor:
    """logits (B, |V|) -> token ids (B, 1); temperature 0 takes the most likely token after the penalties.

    The penalties read ``counts`` (``TokenCounts``), which this call updates with the drawn tokens, so
    a caller keeps one for the whole generation; without penalties it may be None. The order of the
    processors is Hugging Face's (``generation.processors``); with every setting off the result is
    what plain temperature and top-k sampling gives. ``generator``: one for the batch, or one per row (so a
    row's draws do not depend on the rows beside it).
    """
    logits = _penalized(logits, counts, repetition_penalty, presence_penalty, frequency_penalty)
    token = logits.argmax(dim=-1, keepdim=True) if temperature == 0 else _drawn(
        logits.float(), temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, generator=generator)
    if counts is not None:
        counts.add(token)
    return token  # (B, 1)


def _penalized(logits: torch.Tensor, counts: TokenCounts | None, repetition: float | None, presence: float,
               frequency: float) -> torch.Tensor:
    """The logits with the repetition, presence and frequency penalties that are on (all off: unchanged)."""
    wanted = repetition not in (None, 1.0) or presence != 0 or frequency != 0
    if not wanted:
        return logits
    if counts is None:
        raise InputError(Problem(path="counts", expected="the TokenCounts of the generation so far, which the "
                                 "penalties read", found="None"))
    if repetition not in (None, 1.0):
        logits = repetition_penalized(logits, counts.seen(), repetition)
    if presence != 0 or frequency != 0:
        logits = presence_frequency_penalized(logits, counts.generated, presence, frequency)
    return logits


def _drawn(logits: torch.Tensor, *, temperature: float, top_k: int | None, top_p: float | None, min_p: float | None,
           generator: torch.Generator | Sequence[torch.Generator] | None) -> torch.Tensor:
    """One draw per row from float logits (B, |V|) after the filters; top-k first, as it commutes with temperature."""
    if top_k is not None:
        logits = top_k_filtered(logits, top_k)
    logits = temperature_scaled(logits, temperature)
    if top_p is not None and top_p < 1:
        logits = top_p_filtered(logits, top_p)
    if min_p is not None and min_p > 0:
        logits = min_p_filtered(logits, min_p)
    probs = logits.softmax(dim=-1)
    if generator is None or isinstance(generator, torch.Generator):
        return torch.multinomial(probs, 1, generator=generator)  # (B, 1)
    return torch.cat([torch.multinomial(probs[r:r + 1], 1, generator=g) for r, g in enumerate(generator)])  # (B, 1)


def row_seed(seed: int, row: int) -> int:
    """Row ``row``'s seed: seed + row, wrapped past the largest seed (2**64 - 1) to 0.."""
    return seed + row if seed + row < 2**64 else seed + row - 2**64


def _device_of(model: Transformer) -> torch.device:
    """Where a ragged batch's packed ids go: the model's device."""
    return next(model.parameters()).device


def check_request(model: Transformer, ids: torch.Tensor, *, max_new_tokens: int, temperature: float = 1.0,
                  top_k: int | None = None, top_p: float | None = None, min_p: float | None = None,
                  repetition_penalty: float | None = None, presence_penalty: float = 0.0,
                  frequency_penalty: float = 0.0, overflow: str = "slide", seed: int | None = None,
                  vocab_limit: int | None = None) -> None:
    """``generate``'s own checks, which it makes before any kernel runs: bad arguments (``generation_bounds``),
    and (overflow="error") positions a learned table cannot hold. A caller with several requests asks them
    all before it generates the first."""
    check_token_ids(ids, min_length=1)
    check_generation_arguments(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                               min_p=min_p, repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
                               frequency_penalty=frequency_penalty, seed=seed, overflow=overflow, vocab_limit=vocab_limit, vocab_size=model.embedding.num_embeddings)
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
