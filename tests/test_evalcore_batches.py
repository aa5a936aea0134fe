"""``evaluate.windows.batches``: the windows of ``windows``, grouped as scoring takes them, cut as arrays.

The reference is one Window per window grouped ``size`` at a time with a new group where the length
changes, as scoring grouped them before: the batches must hold the same ids, row for row, and score from
the same places, however the ids arrive in pieces, so the figures ``blockspec eval`` prints stay the same."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from blockspec.evaluate import windows as windows_module
from blockspec.evaluate.windows import Window, batches, windows


def grouped(found: list[Window], size: int) -> list[list[Window]]:
    """Consecutive windows, ``size`` at a time, a new group where their length changes."""
    groups: list[list[Window]] = []
    for window in found:
        if groups and len(groups[-1]) < size and len(window.ids) == len(groups[-1][0].ids):
            groups[-1].append(window)
        else:
            groups.append([window])
    return groups


def cut(ids: list[int], cuts: list[int]) -> list[list[int]]:
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(ids)), len(ids)]
    return [ids[a:b] for a, b in zip(bounds, bounds[1:])]


def assert_same(ids: list[int], cuts: list[int], context: int, stride: int, size: int) -> None:
    expected = grouped(list(windows(cut(ids, cuts), context=context, stride=stride)), size)
    found = list(batches(cut(ids, cuts), context=context, stride=stride, size=size))
    assert len(found) == len(expected)
    for batch, group in zip(found, expected):
        assert batch.ids.dtype == np.int64 and batch.ids.flags.c_contiguous
        assert np.array_equal(batch.ids, np.stack([w.ids for w in group]))  # (B, T + 1)
        assert batch.scored_from.tolist() == [w.scored_from for w in group]
        assert batch.tokens == sum(len(w.targets) - w.scored_from for w in group)
        starts = {w.scored_from for w in group}
        assert batch.start == (starts.pop() if len(starts) == 1 else None)


@settings(max_examples=300, deadline=None)
@given(length=st.integers(0, 90), context=st.integers(1, 20), data=st.data())
def test_the_batches_are_the_windows_grouped_as_scoring_groups_them(length, context, data):
    stride = data.draw(st.integers(1, context))
    size = data.draw(st.integers(1, 9))
    cuts = data.draw(st.lists(st.integers(0, 90), max_size=6))
    assert_same(list(range(length)), cuts, context, stride, size)


def test_a_few_lengths_strides_and_sizes_one_by_one():
    """Edges: a text shorter than a window, exactly one window, one id past it, a stride of one, a batch of one."""
    for length, context, stride, size in [(0, 4, 4, 2), (1, 4, 4, 2), (2, 4, 4, 2), (4, 4, 4, 2), (5, 4, 4, 2),
                                          (6, 4, 4, 2), (23, 5, 5, 2), (12, 6, 2, 3), (12, 6, 2, 1), (40, 8, 1, 5),
                                          (64 * 9 + 1, 64, 64, 8), (64 * 9 + 2, 64, 64, 8), (1000, 64, 32, 8)]:
        for cuts in ([], [1], [3, 7], list(range(0, length, 5))):
            assert_same(list(range(length)), cuts, context, stride, size)


def test_the_first_window_of_a_smaller_stride_masks_its_batch():
    found = list(batches([list(range(12))], context=6, stride=2, size=2))
    assert [(b.ids[:, 0].tolist(), b.scored_from.tolist(), b.start) for b in found] == [
        ([0, 2], [0, 4], None), ([4], [4], 4), ([6], [4], 4)]
    assert [b.tokens for b in found] == [6 + 2, 2, 1]


def test_the_batches_hold_no_more_than_a_piece_and_a_run_of_windows():
    """Constant memory: each batch is a view of a run of rows cut at once, of at most RUN_IDS ids (or one batch),
    and what is held is bounded by a piece and a run."""
    piece, context, stride, size = 100_000, 16, 8, 4
    pieces = (np.arange(start, start + piece) for start in range(0, 1_000_000, piece))
    bound = max(windows_module.RUN_IDS, size * (context + 1))
    runs, last = 0, None
    for batch in batches(pieces, context=context, stride=stride, size=size):
        run = batch.ids if batch.ids.base is None else batch.ids.base
        assert run.size <= bound
        assert batch.ids.shape[0] <= size
        runs, last = runs + (run is not last), run
    assert runs > 1  # cut run by run, not all at once
