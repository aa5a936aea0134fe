"""Autoregressive sampling from a language model, with or without a KV cache."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from attrs import define

from blockspec.assembly.memory import check_fits, generation_estimate
from blockspec.errors import ContextLengthError, InputError, Problem
from blockspec.modules.kv_cache import KVCache
from blockspec.modules.transformer import Transformer
from blockspec.modules.token_ids import check_token_ids
from blockspec.train.finite import check_finite_weights, non_finite_logits
from blockspec.generation.bounds import check_vocab_limit
from blockspec.generation.ragged import Prompts, interleaved, pack, runs
from blockspec.generation.static_decode import StaticDecoder
from blockspec.generation.processors import (TokenCounts, min_p_filtered, presence_frequency_penalized,
                                             repetition_penalized, temperature_scaled, top_k_filtered, top_p_filtered)
from blockspec.generation.settings import GenerationSettings, settings_with
from blockspec.generation.stopping import StopConditions


def generate(model: Transformer, ids: torch.Tensor | Prompts, settings: GenerationSettings | None = None, *,
             vocab_limit: int | None = None, source: str = "the model", memory_check: bool = True,
             decode: Callable[[list[int]], str] | None = None, **overrides: Any) -> torch.Tensor | list[torch.Tensor]:
    """ids (B, N) -> (B·S, N + T): each prompt, repeated for its S = ``num_samples`` samples, then T <=
    max_new_tokens sampled tokens. A list of prompts of any lengths (each a list or 1-D tensor of ids) -> a
    list of (N_r + T,), prompt by prompt and each prompt's samples in turn: one ragged batch
    (``generate_stream``), each row as that prompt alone would give.

    ``settings`` (a ``GenerationSettings``; default: the defaults), with any of its fields given as keywords
    instead (``max_new_tokens=8, temperature=0``). ``generate_stream``'s steps joined: the run ends early when
    every row has met a stop (an id in ``stop_ids``, or a text in ``stop``, matched on ``decode`` of the row's
    new tokens; see ``generation.stopping``). A row that stops first is padded with the first stop id (else its
    last token). ``eos`` is the text layer's (it knows the tokenizer): here a stop is an id in ``stop_ids``.

    The cache only saves work: cached and uncached decoding compute the same logits, so greedy outputs are
    identical. A positional encoder with a bounded table (learned positions: ``max_positions`` =
    context_length) cannot see past it. ``overflow="slide"`` (the default) then conditions each step on the
    last ``max_positions`` tokens, as nanoGPT does: the cache serves while the sequence fits, after which
    every step recomputes the cropped window without it (a slid window starts at position 0, so cached keys
    would sit at the wrong positions). ``overflow="error"`` refuses such a request up front with
    ContextLengthError. Unbounded encoders (sinusoidal, RoPE) never slide.

    ``vocab_limit`` samples only ids below it: a tokenizer can know fewer tokens than the model's vocabulary
    (65 characters in a 128-entry embedding), and an id it cannot decode must never be drawn.

    Weights that hold NaN or Inf are refused before the first step, logits that come out NaN or Inf after
    the last (NonFiniteError naming ``source``): checking each step would wait on the device.
    ``memory_check`` refuses, before the cache is made, a request whose cache and working tensors the device
    cannot hold (``blockspec.assembly.memory``); False tries anyway.
    """
    settings = settings_with(settings, overrides)
    steps = list(generate_stream(model, ids, settings, vocab_limit=vocab_limit, source=source,
                                 memory_check=memory_check, decode=decode))
    if isinstance(ids, torch.Tensor):
        return torch.cat((_rows(ids, settings), *(token[:, None] for token in steps)), dim=1)  # (B·S, N + T)
    prompts = [torch.as_tensor(prompt, dtype=torch.long) for prompt in ids for _ in range(settings.num_samples)]
    new = torch.stack(steps, dim=1) if steps else torch.zeros((len(prompts), 0), dtype=torch.long)  # (B·S, T)
    return [torch.cat((prompt.to(new.device), row)) for prompt, row in zip(prompts, new)]  # each (N_r + T,)


def generate_stream(model: Transformer, ids: torch.Tensor | Prompts, settings: GenerationSettings | None = None, *,
                    vocab_limit: int | None = None, source: str = "the model", memory_check: bool = True,
                    decode: Callable[[list[int]], str] | None = None, **overrides: Any) -> Iterator[torch.Tensor]:
    """``generate``'s steps, each the new tokens (B·S,) as sampled; the same arguments, checked before it returns.

    Between steps the model stays in eval mode (restored when the stream ends or is closed); inference mode
    holds only while a step runs.

    Ragged batches: ``ids`` may be a list of prompts of different lengths. They are left-padded into one
    batch whose KV cache carries each row's padding (``generation.ragged``); each row's tokens are those of
    that prompt alone: row r draws from its own generator (``GenerationSettings.row_seeds``), so sample i of
    any prompt is its solo run with seed + i. Where the cache cannot serve (``use_cache=False``, or a learned
    table the longest row would slide past) runs of consecutive prompts of one length are decoded as batches
    of their own, their steps interleaved: the same tokens, slower.
    """
    settings = settings_with(settings, overrides)
    ids, padding = (ids, None) if isinstance(ids, torch.Tensor) else pack(ids, device=_device_of(model))
    check_request(model, ids, settings, vocab_limit=vocab_limit)
    context = _Context(vocab_limit=vocab_limit, source=source, memory_check=memory_check, decode=decode)
    seeds = settings.row_seeds(ids.shape[0])
    return _stream(model, _rows(ids, settings), _rows(padding, settings), seeds, settings, context)


@define(kw_only=True)
class _Context:
    """What a request says beside its settings: the ids sampling may draw, the source's name, the checks."""

    vocab_limit: int | None
    source: str
    memory_check: bool
    decode: Callable[[list[int]], str] | None


def _stream(model: Transformer, ids: torch.Tensor, padding: torch.Tensor | None, seeds: list[int] | None,
            settings: GenerationSettings, context: _Context) -> Iterator[torch.Tensor]:
    """Rows (B, N) (left-padded by ``padding`` (B,), or None), each drawing with its seed, decoded step by step."""
    window = model.positional.max_positions  # None: unbounded, the whole sequence is always the input
    batch, n_prompt = ids.shape
    max_new_tokens = settings.max_new_tokens
    if padding is not None and not (settings.use_cache and (window is None or n_prompt + max_new_tokens <= window)):
        return _grouped(model, ids, padding, seeds, settings, context)
    stops = StopConditions(batch, stop_ids=settings.stop_ids, stop_strings=settings.stop, decode=context.decode,
                           device=ids.device)
    cached = settings.use_cache and (window is None or n_prompt <= window)
    length = n_prompt + max_new_tokens if window is None else min(n_prompt + max_new_tokens, window)
    if context.memory_check:  # first: the estimate reads no weight
        _check_memory(model, ids, length, cached=cached, new_tokens=max_new_tokens)
    check_finite_weights(model, source=context.source)
    decoder = StaticDecoder(model, batch_size=batch, max_length=n_prompt + max_new_tokens, padding=padding,
                            compile=True) if settings.compile else None
    cache = decoder.cache if decoder is not None else \
        KVCache.for_model(model, batch_size=batch, max_length=length, padding=padding) if cached else None
    generators = None if seeds is None else [torch.Generator(ids.device).manual_seed(seed) for seed in seeds]
    run = _Settings(filters=settings.filters, vocab_limit=context.vocab_limit, generator=generators, window=window,
                    source=context.source)
    return _steps(model, ids, cache, stops, run, max_new_tokens, decoder)


def _grouped(model: Transformer, ids: torch.Tensor, padding: torch.Tensor, seeds: list[int] | None,
             settings: GenerationSettings, context: _Context) -> Iterator[torch.Tensor]:
    """A ragged batch no cache can serve: each run of consecutive equal-length rows as a batch of its own."""
    streams = [(rows, _stream(model, ids[rows.start:rows.stop, int(padding[rows.start]):], None,
                              None if seeds is None else seeds[rows.start:rows.stop], settings, context))
               for rows in runs(padding)]
    return interleaved(streams, ids.shape[0], settings.stop_ids[0] if settings.stop_ids else None)


def _rows(ids: torch.Tensor | None, settings: GenerationSettings) -> torch.Tensor | None:
    """(B, ...) -> (B·S, ...): each prompt's row (or padding) once per sample, its samples side by side."""
    if ids is None or settings.num_samples == 1:
        return ids
    return ids.repeat_interleave(settings.num_samples, dim=0)  # (B, N) -> (B·S, N)


@define(kw_only=True)
class _Settings:
    """What every step of one run reads."""

    filters: dict[str, float | int | None]  # ``sample``'s keywords: temperature, top-k, top-p, min-p, penalties
    vocab_limit: int | None
    generator: list[torch.Generator] | None  # one per row
    window: int | None
    source: str


def _steps(model: Transformer, ids: torch.Tensor, cache: KVCache | None, stops: StopConditions, settings: _Settings,
           max_new_tokens: int, decoder: StaticDecoder | None = None) -> Iterator[torch.Tensor]:
    """The decoding loop: one (B,) per step until ``max_new_tokens`` or every row stops; a row that stops
    leaves the batch (``_Live.drop``), so finished rows cost no compute while the others go on. With a
    ``decoder`` (``compile``) each step after the prompt is its captured step, whose batch stays whole."""
    finite = torch.ones((), dtype=torch.bool, device=ids.device)  # every step's logits so far
    live = _Live.begin(model, ids, cache, settings)
    last_only = positionwise_head(model)
    with eval_mode(model):
        for _ in range(max_new_tokens):
            with torch.inference_mode():
                logits = live.logits(model, decoder, last_only)[:, :settings.vocab_limit]  # (b, V) -> (b, |V|)
                step_finite = torch.isfinite(logits).all()
                finite &= step_finite
                logits = torch.where(step_finite, logits, 0.0)  # sampling must not fail on NaN: the end refuses them
                drawn = sample(logits, **settings.filters, counts=live.counts, generator=live.generators)  # (b, 1)
                token = stops.step(live.scattered(drawn[:, 0], stops.pad)) if stops.active else drawn[:, 0]  # (B,)
                live.advance(token, settings.window)
            yield token.clone()  # (B,): a plain tensor outside inference mode
            if stops.active and stops.all_finished():
                break
            if stops.active and decoder is None:  # a captured step keeps its shapes: its rows stay
                with torch.inference_mode():
                    live.drop(stops.finished)
    if not bool(finite):
        raise non_finite_logits(settings.source)


@define(kw_only=True)
class _Live:
    """The rows still decoding and what their next step reads: the rows' sequences (b, N + t), the step's
    input and start, the cache, the penalties' counts and the generators, all of the b live rows only.
    ``rows`` (b,) are their places in the batch; None while every row is live (no indexing at all)."""

    rows: torch.Tensor | None
    tokens: torch.Tensor
    step_input: torch.Tensor
    start: int
    cache: KVCache | None
    counts: TokenCounts
    generators: list[torch.Generator] | None
    recompute_at: int | None = None  # the cache is recomputed when a step first ends past this (longrope)

    @classmethod
    def begin(cls, model: Transformer, ids: torch.Tensor, cache: KVCache | None, settings: _Settings) -> _Live:
        counts = TokenCounts.start(ids, settings.vocab_limit or model.embedding.num_embeddings,  # the penalties read
                                   padding=None if cache is None else cache.padding)
        return cls(rows=None, tokens=ids, step_input=_cropped(ids, settings.window), start=0, cache=cache,
                   counts=counts, generators=settings.generator, recompute_at=recompute_point(model))

    def logits(self, model: Transformer, decoder: StaticDecoder | None, last_only: bool) -> torch.Tensor:
        """The next token's logits (b, V) for every live row: the model's, or the static decoder's."""
        if decoder is None:
            return model(self.step_input, start=self.start, cache=self.cache, last_only=last_only)[:, -1]  # (b, V)
        if self.start == 0:
            return decoder.prefill(self.step_input, last_only=last_only)  # (b, V)
        return decoder.step(self.step_input, torch.tensor(self.start, device=self.step_input.device))  # (b, V)

    def scattered(self, drawn: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        """The live rows' tokens (b,) in their places of the batch (B,); the finished rows' ``pad``."""
        if self.rows is None:
            return drawn
        return pad.index_copy(0, self.rows, drawn)  # (B,)

    def advance(self, token: torch.Tensor, window: int | None) -> None:
        """Append the step's tokens (B,) to the live rows; next, only the new token at its position, while the
        cache serves, else the (last) window recomputed."""
        token = (token if self.rows is None else token[self.rows])[:, None]  # (B,) -> (b, 1)
        self.tokens = torch.cat((self.tokens, token), dim=1)  # (b, N + t)
        serves = self.cache is not None and (window is None or self.tokens.shape[1] <= window)
        if serves and self.tokens.shape[1] - 1 == self.recompute_at:  # the step is the first to end past it
            self.step_input, self.start = self.tokens, 0  # the whole sequence again, over the cache (a rewind)
        elif serves:
            self.step_input, self.start = token, self.tokens.shape[1] - 1
        else:
            self.cache, self.step_input, self.start = None, _cropped(self.tokens, window), 0

    def drop(self, finished: torch.Tensor) -> None:
        """Leave out the rows that ``finished`` (B,) marks: their cache rows, counts and generators too."""
        rows = torch.arange(finished.shape[0], device=finished.device) if self.rows is None else self.rows
        keep = ~finished[rows]  # (b,)
        if bool(keep.all()):
            return
        kept = keep.nonzero()[:, 0]  # (b',)
        self.rows, self.tokens, self.step_input = rows[kept], self.tokens[kept], self.step_input[kept]
        self.counts = TokenCounts(in_prompt=self.counts.in_prompt[kept], generated=self.counts.generated[kept])
        if self.generators is not None:
            self.generators = [g for g, k in zip(self.generators, keep.tolist()) if k]
        if self.cache is not None:
            self.cache.keep_rows(kept)


def recompute_point(model: Transformer) -> int | None:
    """The first length past which a cached step recomputes the whole cache: an encoder's ``recompute_cache_at``
    (longrope RoPE: the cached keys were turned by the short factors, every key of a call past it takes the long
    ones); None when no encoder has one."""
    points = [p for module in getattr(model, "positionals", ())
              if (p := getattr(module, "recompute_cache_at", None)) is not None]
    return min(points, default=None)


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
    what plain temperature and top-k sampling gives. ``generator``: one for the batch, or one per row (so
    a row draws as it would alone).
    """
    logits = penalized(logits, counts, repetition_penalty, presence_penalty, frequency_penalty)
    token = logits.argmax(dim=-1, keepdim=True) if temperature == 0 else _drawn(
        logits.float(), temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, generator=generator)
    if counts is not None:
        counts.add(token)
    return token  # (B, 1)


def penalized(logits: torch.Tensor, counts: TokenCounts | None, repetition: float | None, presence: float,
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
    """One draw per row from float logits (B, |V|) after the filters."""
    probabilities = filtered_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    if generator is None or isinstance(generator, torch.Generator):
        return torch.multinomial(probabilities, 1, generator=generator)  # (B, 1)
    rows = [torch.multinomial(row[None], 1, generator=g) for row, g in zip(probabilities, generator, strict=True)]
    return torch.cat(rows)  # B x (1, 1) -> (B, 1)


def filtered_probabilities(logits: torch.Tensor, *, temperature: float, top_k: int | None = None,
                           top_p: float | None = None, min_p: float | None = None) -> torch.Tensor:
    """Float logits (B, |V|) -> what a sampled step draws from (B, |V|); top-k first, as it commutes with the
    temperature. Speculative decoding compares two models' distributions, so they are had apart from the draw."""
    if top_k is not None:
        logits = top_k_filtered(logits, top_k)
    logits = temperature_scaled(logits, temperature)
    if top_p is not None and top_p < 1:
        logits = top_p_filtered(logits, top_p)
    if min_p is not None and min_p > 0:
        logits = min_p_filtered(logits, min_p)
    return logits.softmax(dim=-1)


def _device_of(model: Transformer) -> torch.device:
    """Where a ragged batch's packed ids go: the model's device."""
    return next(model.parameters()).device


def check_request(model: Transformer, ids: torch.Tensor, settings: GenerationSettings | None = None, *,
                  vocab_limit: int | None = None, **overrides: Any) -> None:
    """``generate``'s own checks, which it makes before any kernel runs: the ids, the settings
    (``GenerationSettings`` checks its own bounds), the vocabulary limit and (overflow="error") positions a
    learned table cannot hold. A caller with several requests asks them all before it generates the first."""
    settings = settings_with(settings, overrides)
    check_token_ids(ids, min_length=1)
    check_vocab_limit(vocab_limit, model.embedding.num_embeddings)
    max_new_tokens, overflow = settings.max_new_tokens, settings.overflow
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


def positionwise_head(model: Transformer) -> bool:
    """Whether the head may see the last position alone: an "lm" head, which the conformance kit checks."""
    return "lm" in head_promises(model)


def head_promises(model: Transformer) -> frozenset[str]:
    """What the model's head component promises (nothing for a model built without provenance)."""
    head = getattr(model, "provenance", {}).get("head")
    return frozenset() if head is None else frozenset(head.promises)


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """``model`` in eval mode inside the block (no dropout), in its own mode again after."""
    was_training = model.training
    switch = any(module.training for module in model.modules())  # all in eval already: no switch, either way
    if switch:
        model.eval()
    try:
        yield
    finally:
        if switch:
            model.train(was_training)
