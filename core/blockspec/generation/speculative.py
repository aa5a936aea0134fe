"""Speculative decoding: a small draft model proposes K tokens, the target checks them in one forward pass.

Each round the draft decodes K tokens from its own cache; the target scores them all at once from its cache,
and the accept/reject rule (``generation.acceptance``) keeps a prefix of them plus one token of its own, so a
round yields 1 to K+1 tokens for one target pass. Both caches then rewind past the refused positions (a forward
pass at ``start`` <= ``cache.length`` overwrites them). Greedy output is the target's own greedy output, token
for token; sampled output follows the target's filtered distribution exactly. Batch 1 only.

A learned position table bounds both models: rounds draft fewer tokens near its end, and past it (with
``overflow="slide"``) decoding goes on as ``generate`` does, one plain uncached target step over the last
``context_length`` tokens at a time, with nothing drafted.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any

import torch
from attrs import define, field

from blockspec.assembly.memory import check_fits, generation_estimate
from blockspec.errors import InputError, Problem
from blockspec.generation.acceptance import accepted, accepted_greedy
from blockspec.generation.bounds import DEFAULT_DRAFT_TOKENS, check_draft_tokens
from blockspec.generation.stopping import StopConditions
from blockspec.generation.processors import TokenCounts
from blockspec.generation.settings import GenerationSettings, settings_with
from blockspec.generation.tokens import penalized  # the penalties in sample()'s order
from blockspec.generation.tokens import check_request, eval_mode, filtered_probabilities
from blockspec.modules.kv_cache import KVCache
from blockspec.modules.transformer import Transformer
from blockspec.train.finite import check_finite_weights, non_finite_logits


@define
class SpeculativeStats:
    """What the draft saved: ``accepted`` of the ``drafted`` tokens passed, over ``rounds`` target passes."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted drafted tokens / drafted tokens; None while nothing was drafted."""
        return self.accepted / self.drafted if self.drafted else None


class SpeculativeStream:
    """The new tokens, a (1,) tensor each as ``generate_stream`` yields them, and the ``stats`` so far."""

    def __init__(self, steps: Generator[torch.Tensor, None, None], stats: SpeculativeStats) -> None:
        self._steps, self.stats = steps, stats

    def __iter__(self) -> SpeculativeStream:
        return self

    def __next__(self) -> torch.Tensor:
        return next(self._steps)

    def close(self) -> None:
        """End the run early: the models go back to their own mode."""
        self._steps.close()


def speculative_generate(model: Transformer, draft: Transformer, ids: torch.Tensor,
                         settings: GenerationSettings | None = None, **options: Any) -> tuple[torch.Tensor, SpeculativeStats]:
    """ids (1, N) -> ((1, N + T), stats): ``speculative_stream``'s tokens after the prompt (the same arguments)."""
    stream = speculative_stream(model, draft, ids, settings, **options)
    tokens = [token[:, None] for token in stream]  # T x (1,) -> T x (1, 1)
    return torch.cat((ids, *tokens), dim=1), stream.stats  # (1, N) + T x (1, 1) -> (1, N + T)


def speculative_stream(model: Transformer, draft: Transformer, ids: torch.Tensor,
                       settings: GenerationSettings | None = None, *, draft_tokens: int = DEFAULT_DRAFT_TOKENS,
                       vocab_limit: int | None = None, source: str = "the model", draft_source: str = "the draft",
                       memory_check: bool = True, decode: Callable[[list[int]], str] | None = None,
                       **overrides: Any) -> SpeculativeStream:
    """``generate_stream`` with ``draft`` proposing ``draft_tokens`` tokens a round; checked before it returns.

    The arguments are ``generate_stream``'s. The penalties and filters apply to both models' logits, as
    ``sample`` applies them; at each drafted position the penalties count the drafted tokens before it, so the
    rule compares the distributions plain decoding would have there. The draft must share the target's
    vocabulary (``vocab_limit``, if given, bounds both); one sample of one prompt, from both models' caches.
    """
    settings = settings_with(settings, overrides)
    check_request(model, ids, settings, vocab_limit=vocab_limit)
    check_draft(model, draft, ids, settings, draft_tokens=draft_tokens, vocab_limit=vocab_limit)
    stops = StopConditions(1, stop_ids=settings.stop_ids, stop_strings=settings.stop, decode=decode, device=ids.device)
    new_tokens = settings.max_new_tokens
    target_cache, draft_cache = (_cache_for(m, ids, new_tokens, memory_check, draft_tokens) for m in (model, draft))
    check_finite_weights(model, source=source)
    check_finite_weights(draft, source=draft_source)
    seeds = settings.row_seeds(1)
    run = _Run(target=model, draft=draft, target_cache=target_cache, draft_cache=draft_cache, draft_tokens=draft_tokens,
               filters=dict(temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
                            min_p=settings.min_p), penalties=_penalties(settings),
               counts=TokenCounts.start(ids, vocab_limit or model.embedding.num_embeddings), vocab_limit=vocab_limit,
               generator=None if seeds is None else torch.Generator(ids.device).manual_seed(seeds[0]),
               sources=(source, draft_source))
    stats = SpeculativeStats()
    return SpeculativeStream(_stopped(run, _new_tokens(run, ids, stats, new_tokens), stops), stats)


def _check_one_sequence(ids: torch.Tensor, settings: GenerationSettings) -> None:
    """Speculative decoding runs one sequence (one prompt, one sample), from both models' caches."""
    if ids.shape[0] != 1:
        raise InputError(Problem(path="ids", expected="one prompt (a batch of 1): speculative decoding runs one "
                                 "sequence", found=f"a batch of {ids.shape[0]}", hint="generate each prompt in turn"))
    for name, value, needed in (("num_samples", settings.num_samples, 1), ("use_cache", settings.use_cache, True),
                                ("compile", settings.compile, False)):
        if value != needed:
            raise InputError(Problem(path=name, expected=f"{needed!r} with a draft model (speculative decoding runs "
                                     "one sequence, from both models' caches)", found=repr(value),
                                     hint="generate without the draft"))


def _penalties(settings: GenerationSettings) -> dict[str, float | None] | None:
    """``penalized``'s keywords, or None when every penalty is off (the rows then need no counts)."""
    repetition, presence, frequency = settings.repetition_penalty, settings.presence_penalty, settings.frequency_penalty
    on = repetition not in (None, 1.0) or presence != 0 or frequency != 0
    return dict(repetition=repetition, presence=presence, frequency=frequency) if on else None


def check_draft(model: Transformer, draft: Transformer, ids: torch.Tensor, settings: GenerationSettings, *,
                draft_tokens: object, vocab_limit: int | None) -> None:
    """One sequence from the caches, a K >= 1, and a draft on the target's device that can draw every id the
    target can."""
    check_draft_tokens(draft_tokens)
    _check_one_sequence(ids, settings)
    rows, draft_rows = model.embedding.num_embeddings, draft.embedding.num_embeddings
    if (rows != draft_rows) if vocab_limit is None else vocab_limit > draft_rows:
        wanted = f"{rows} token ids" if vocab_limit is None else f"at least the {vocab_limit} ids of vocab_limit"
        raise InputError(Problem(path="draft", expected=f"a draft with the target's vocabulary ({wanted})",
                                 found=f"a vocabulary of {draft_rows}",
                                 hint="draft with a model of the same tokenizer as the target"))
    device, draft_device = (next(m.parameters()).device for m in (model, draft))
    if device != draft_device:
        raise InputError(Problem(path="draft", expected=f"a draft on the target's device ({device})",
                                 found=f"one on {draft_device}", hint="move both models to one device"))


def _cache_for(model: Transformer, ids: torch.Tensor, max_new_tokens: int, memory_check: bool,
               draft_tokens: int) -> KVCache | None:
    """``generate``'s cache rule: sized for the whole request, or its table; none for a prompt past the table."""
    window, n_prompt = model.positional.max_positions, ids.shape[1]
    if window is not None and n_prompt > window:
        return None
    length = n_prompt + max_new_tokens if window is None else min(n_prompt + max_new_tokens, window)
    if memory_check:
        estimate = generation_estimate(model, batch=1, queries=n_prompt + draft_tokens, length=length, cached=True)
        check_fits(estimate, ids.device, doing=f"generating {max_new_tokens:,} tokens", source=None if model.spec is None else model.spec.source)
    return KVCache.for_model(model, batch_size=1, max_length=length)


@define(kw_only=True)
class _Run:
    """What the rounds of one run read, and the positions each cache holds for the tokens kept so far."""

    target: Transformer
    draft: Transformer
    target_cache: KVCache | None  # None: the sequence is past the target's table (or the prompt was)
    draft_cache: KVCache | None
    draft_tokens: int
    filters: dict[str, float | int | None]  # temperature, top-k, top-p, min-p: ``filtered_probabilities``'s
    penalties: dict[str, float | None] | None  # repetition, presence, frequency: ``penalized``'s; None: all off
    counts: TokenCounts  # the prompt's ids and the kept tokens' counts, which the penalties read
    vocab_limit: int | None
    generator: torch.Generator | None
    sources: tuple[str, str]
    target_fed: int = 0  # positions 0..target_fed-1 of the kept tokens are in the target's cache
    draft_fed: int = 0
    finite: list[bool] = field(factory=lambda: [True, True])  # (target, draft): every logit so far, checked at the end

    @property
    def greedy(self) -> bool:
        return self.filters["temperature"] == 0


def _stopped(run: _Run, tokens: Iterator[torch.Tensor],
             stops: StopConditions) -> Generator[torch.Tensor, None, None]:
    """The tokens, up to and with the one that meets a stop; the models in eval mode meanwhile."""
    with eval_mode(run.target), eval_mode(run.draft):
        for token in tokens:
            token = stops.step(token) if stops.active else token
            yield token
            if stops.active and stops.all_finished():
                break
    for finite, source in zip(run.finite, run.sources):
        if not finite:
            raise non_finite_logits(source)


def _new_tokens(run: _Run, ids: torch.Tensor, stats: SpeculativeStats, max_new_tokens: int) -> Iterator[torch.Tensor]:
    """Round after round, each kept token as a (1,) tensor, until ``max_new_tokens``."""
    tokens, made = ids, 0
    while made < max_new_tokens:
        with torch.inference_mode():
            new = _round(run, tokens, _round_size(run, tokens.shape[1], max_new_tokens - made), stats)  # (n,)
            tokens = torch.cat((tokens, new[None]), dim=1)  # (1, L) + (1, n) -> (1, L + n)
        for token in new.clone():  # a plain tensor outside inference mode
            made += 1
            yield token[None]  # () -> (1,)


def _round_size(run: _Run, length: int, left: int) -> int:
    """How many tokens to draft: K, fewer where the budget or either model's position table ends."""
    bounds = [run.draft_tokens, left - 1]  # a round yields up to K + 1 tokens
    target_window, draft_window = run.target.positional.max_positions, run.draft.positional.max_positions
    if target_window is not None:
        bounds.append(target_window - length)  # the target scores positions up to length + K - 1
    if draft_window is not None:
        bounds.append(draft_window - length + 1)  # the draft reads positions up to length + K - 2
    return max(0, min(bounds)) if run.target_cache is not None and run.draft_cache is not None else 0


def _round(run: _Run, tokens: torch.Tensor, k: int, stats: SpeculativeStats) -> torch.Tensor:
    """tokens (1, L) kept so far -> the 1..k+1 tokens (n,) this round keeps; both caches rewound to them."""
    drafted, draft_rows = _proposed(run, tokens, k)  # (1, k), (1, k, |V|)
    target_rows = _penalized_rows(run, _scored(run, tokens, drafted), drafted)  # (1, k + 1, |V|)
    if run.greedy:
        out, kept = accepted_greedy(target_rows.argmax(dim=-1), drafted)
    else:
        out, kept = accepted(_probabilities(run, target_rows), draft_rows, drafted, generator=run.generator)
    n = int(kept[0])
    run.counts.add(out[:, :n + 1])
    run.target_fed, run.draft_fed = (min(fed, tokens.shape[1] + n) for fed in (run.target_fed, run.draft_fed))
    stats.rounds, stats.drafted, stats.accepted = stats.rounds + 1, stats.drafted + k, stats.accepted + n
    return out[0, :n + 1]


def _proposed(run: _Run, tokens: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The draft's k tokens (1, k) after ``tokens`` (1, L), and the distributions it drew them from (1, k, |V|)."""
    drafted: list[torch.Tensor] = []
    rows: list[torch.Tensor] = []
    step, start = tokens[:, run.draft_fed:], run.draft_fed  # what the draft's cache lacks, then one token at a time
    for _ in range(k):
        logits = _logits(run, 1, run.draft(step, start=start, cache=run.draft_cache))[:, -1:]  # (1, n, |V|) -> (1, 1, |V|)
        so_far = torch.cat(drafted, dim=1) if drafted else tokens.new_zeros((1, 0))  # i x (1, 1) -> (1, i)
        token, row = _chosen(run, _penalized_rows(run, logits, so_far)[:, 0])  # (1, 1), (1, |V|)
        drafted.append(token)
        rows.append(row)
        step, start = token, start + step.shape[1]
    run.draft_fed = start
    if not k:  # the vocabularies are the same (``check_draft``): the target's rows have this width too
        vocab = run.vocab_limit or run.draft.embedding.num_embeddings
        return tokens.new_zeros((1, 0)), tokens.new_zeros((1, 0, vocab), dtype=torch.float)
    return torch.cat(drafted, dim=1), torch.stack(rows, dim=1)  # k x (1, 1) -> (1, k); k x (1, |V|) -> (1, k, |V|)


def _scored(run: _Run, tokens: torch.Tensor, drafted: torch.Tensor) -> torch.Tensor:
    """The target's logits (1, k + 1, |V|) at the last kept position and at each drafted one, in one pass."""
    window, k = run.target.positional.max_positions, drafted.shape[1]
    if run.target_cache is None or (window is not None and tokens.shape[1] > window):
        run.target_cache = None  # slid past the table: each step recomputes the last window, as ``generate`` does
        return _logits(run, 0, run.target(tokens[:, -window:] if window else tokens))[:, -1:]  # (1, N, |V|) -> (1, 1, |V|)
    step = torch.cat((tokens[:, run.target_fed:], drafted), dim=1)  # (1, L - fed) + (1, k) -> (1, L - fed + k)
    logits = run.target(step, start=run.target_fed, cache=run.target_cache)  # (1, L - fed + k, |V|)
    run.target_fed += step.shape[1]
    return _logits(run, 0, logits)[:, -(k + 1):]  # (1, L - fed + k, |V|) -> (1, k + 1, |V|)


def _logits(run: _Run, which: int, logits: torch.Tensor) -> torch.Tensor:
    """Float logits over the sampleable ids; NaN and Inf become 0 (``run.finite`` remembers, the end refuses)."""
    logits = logits[..., :run.vocab_limit].float()  # (1, n, V) -> (1, n, |V|)
    finite = bool(torch.isfinite(logits).all())
    run.finite[which] = run.finite[which] and finite
    return logits if finite else torch.where(torch.isfinite(logits), logits, 0.0)


def _penalized_rows(run: _Run, rows: torch.Tensor, drafted: torch.Tensor) -> torch.Tensor:
    """Logits (1, R, |V|) at the last R of the positions after the kept tokens and each of ``drafted`` (1, m),
    with the penalties over what precedes each: the kept tokens, then the drafted ones before it."""
    if run.penalties is None:
        return rows
    width = run.counts.generated.shape[1]
    drafted_counts = torch.nn.functional.one_hot(drafted[0], width).cumsum(dim=0)  # (m,) -> (m, |V|): counts so far
    before = torch.cat((drafted_counts.new_zeros((1, width)), drafted_counts))[-rows.shape[1]:]  # (m + 1, |V|) -> (R, |V|)
    counts = TokenCounts(in_prompt=run.counts.in_prompt.expand_as(before), generated=run.counts.generated + before)
    return penalized(rows[0], counts, **run.penalties)[None]  # type: ignore[arg-type]  # (R, |V|) -> (1, R, |V|)


def _chosen(run: _Run, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The draft's token (1, 1) from its logits (1, |V|), and the distribution it was drawn from (1, |V|)."""
    if run.greedy:
        return logits.argmax(dim=-1, keepdim=True), logits  # the rule reads no distribution at temperature 0
    probabilities = filtered_probabilities(logits, **run.filters)  # type: ignore[arg-type]
    return torch.multinomial(probabilities, 1, generator=run.generator), probabilities


def _probabilities(run: _Run, rows: torch.Tensor) -> torch.Tensor:
    """(1, k + 1, |V|) logits -> the filtered distributions, row by row as ``sample`` filters a batch."""
    flat = filtered_probabilities(rows[0], **run.filters)  # type: ignore[arg-type]  # (k + 1, |V|)
    return flat[None]  # (k + 1, |V|) -> (1, k + 1, |V|)
