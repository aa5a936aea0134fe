"""The strided windows a text is scored in: each token once, with as much left context as the stride allows.

Hugging Face's perplexity guide ("Perplexity of fixed-length models"), with one difference: a window's
targets are its inputs moved on by one, as a model is trained, so no window's first target goes unscored
and ``stride = context`` loses no token. For a text of ids t_0..t_{N-1}, ``context`` C and ``stride`` S
(1 <= S <= C), window k (k = 0, 1, ..., K with K = max(0, ceil((N - 1 - C) / S))):

- begins at b_k = k·S; its inputs are t[b_k : min(b_k + C, N - 1)], its targets the same positions plus one;
- window 0 scores every target, positions 1..min(C, N - 1); window k >= 1 scores the targets past the
  previous window's last, positions C + (k - 1)·S + 1 .. min(C + k·S, N - 1): the last S of a full window.

So every position p >= 1 is scored exactly once (t_0 has no left context and is not), from the
``left_context(p)`` tokens before it: p when p <= C, else p - S·ceil((p - C) / S), which is at least
C - S + 1. ``stride = context`` gives non-overlapping windows; a smaller stride gives each token more
context and costs C / S times the work.

``windows`` streams them: it holds the ids from the current window's start on (the next window and the
ids of the piece being read), never the whole text. ``batches`` streams the same windows already grouped
as scoring takes them, ``size`` at a time and a new batch where their length changes (only the last window
can be shorter): the windows of ``windows``, without a Python object per window (on the tiny model those cost
about 6% of scoring). The batches are cut a run at a time, up to ``RUN_IDS`` ids in one array, each batch a
view of its rows, so no numpy work runs between two batches' model calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
from attrs import field, frozen

__all__ = ["Batch", "Window", "batches", "left_context", "windows"]


@frozen(eq=False)
class Window:
    """ids[begin : begin + len(ids)]: the inputs and, one position on, the targets; those from ``scored_from`` count."""

    begin: int
    ids: np.ndarray  # (<= C + 1,) int64: the inputs, then the last target
    scored_from: int  # index into the targets: the first one this window scores

    @property
    def inputs(self) -> np.ndarray:
        return self.ids[:-1]  # (T,)

    @property
    def targets(self) -> np.ndarray:
        return self.ids[1:]  # (T,)


@frozen(eq=False)
class Batch:
    """Windows of one length as rows: row r is a window's ids, its targets from ``scored_from[r]`` on count.

    ``start`` and ``tokens`` are worked out once, as the batch is made: scoring reads both for every batch."""

    ids: np.ndarray  # (B, T + 1) int64: each row a window's inputs, then its last target
    scored_from: np.ndarray  # (B,) int64: index into each row's targets, the first one it scores
    start: int | None = field(init=False)  # the scored_from every row shares (scoring takes those alone), else None
    tokens: int = field(init=False)  # how many targets the batch scores

    @start.default
    def _shared_start(self) -> int | None:
        first = int(self.scored_from[0])
        return first if (self.scored_from == first).all() else None

    @tokens.default
    def _scored_targets(self) -> int:
        return int(self.ids.shape[0] * (self.ids.shape[1] - 1) - self.scored_from.sum())


def left_context(position: int, context: int, stride: int) -> int:
    """How many tokens come before ``position`` in the window that scores it (the formula above)."""
    if position <= context:
        return position
    return position - stride * -(-(position - context) // stride)


def windows(pieces: Iterable[Sequence[int] | np.ndarray], *, context: int, stride: int) -> Iterator[Window]:
    """The windows of the text whose ids arrive in ``pieces``, in order, as soon as the ids each needs are read."""
    held = np.zeros(0, dtype=np.int64)  # ids[offset:]
    offset, number, scored_to = 0, 0, 0  # scored_to: the last position scored so far
    for piece in pieces:
        held = np.concatenate((held, np.asarray(piece, dtype=np.int64)))  # (held + piece,)
        while offset + len(held) > number * stride + context:  # window `number` is full: its last target is read
            yield _window(held, offset, number * stride, context, scored_to)
            scored_to, number = number * stride + context, number + 1
        held, offset = held[number * stride - offset:], number * stride  # from the next window's start on
    if offset + len(held) - 1 > scored_to:  # targets past the last full window: one shorter window
        yield _window(held, offset, number * stride, context, scored_to)


def _window(held: np.ndarray, offset: int, begin: int, context: int, scored_to: int) -> Window:
    ids = held[begin - offset: begin - offset + context + 1]  # (<= C + 1,) a view
    return Window(begin=begin, ids=ids, scored_from=scored_to - begin)


def batches(pieces: Iterable[Sequence[int] | np.ndarray], *, context: int, stride: int, size: int) -> Iterator[Batch]:
    """The windows of ``windows(pieces, ...)`` in batches of ``size`` (fewer before the last, shorter window),
    each as soon as the ids its windows need are read; it holds the ids from the first window not yet batched."""
    held = np.zeros(0, dtype=np.int64)  # ids[offset:]
    offset, number = 0, 0  # number: the windows batched so far; window k begins at k·stride
    for piece in pieces:
        held = np.concatenate((held, np.asarray(piece, dtype=np.int64)))  # (held + piece,)
        while (ready := (_full_windows(offset + len(held), context, stride) - number) // size) > 0:
            run = _rows(held, offset, number, size * min(ready, _run_batches(size, context)), context, stride)
            number += len(run.ids)
            yield from _split(run, size)
        held, offset = held[number * stride - offset:], number * stride  # from the next window's start on
    left = _full_windows(offset + len(held), context, stride) - number
    if left > 0:
        yield _rows(held, offset, number, left, context, stride)
        number += left
    scored_to = 0 if number == 0 else (number - 1) * stride + context  # the last position scored so far
    if offset + len(held) - 1 > scored_to:  # targets past the last full window: one shorter window
        yield Batch(ids=held[number * stride - offset:][None].copy(),  # (1, <= C)
                    scored_from=np.array([scored_to - number * stride], dtype=np.int64))


def _full_windows(read: int, context: int, stride: int) -> int:
    """How many windows the first ``read`` ids fill: window k is full once id k·stride + context is read."""
    return max(0, -(-(read - context) // stride))


RUN_IDS = 1 << 18  # ids (2 MiB) cut into batches at once: one cut between two model calls for each batch
# cost the tiny model ~3% of scoring (the CPU's torch threads idle while numpy works), a cut ahead did not


def _run_batches(size: int, context: int) -> int:
    """How many batches of ``size`` windows are cut at once: those that fit in RUN_IDS ids, and at least one."""
    return max(1, RUN_IDS // (size * (context + 1)))


def _split(run: Batch, size: int) -> list[Batch]:
    """``run``'s windows in batches of ``size``, each a view of its rows."""
    return [Batch(ids=run.ids[first:first + size], scored_from=run.scored_from[first:first + size])
            for first in range(0, len(run.ids), size)]


def _rows(held: np.ndarray, offset: int, first: int, count: int, context: int, stride: int) -> Batch:
    """Full windows first..first+count-1 as one batch; ``held`` is ids[offset:] and holds them all."""
    begins = first * stride - offset + stride * np.arange(count)  # (count,) into held
    ids = held[begins[:, None] + np.arange(context + 1)]  # (count, 1) + (C + 1,) -> (count, C + 1), a copy
    scored_from = np.full(count, context - stride, dtype=np.int64)  # (count,) the last stride targets
    if first == 0:
        scored_from[0] = 0  # a text's first window scores all its targets
    return Batch(ids=ids, scored_from=scored_from)
