"""The strided windows of ``blockspec eval``: every position after the first scored once, with the left
context the formula in ``evaluate.windows`` states, however the ids arrive in pieces."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from blockspec.evaluate.windows import left_context, windows


def scored(length: int, context: int, stride: int, cuts: list[int]) -> dict[int, int]:
    """position -> left context it was scored with; the ids are the positions, arriving cut at ``cuts``."""
    ids, bounds = list(range(length)), [0, *sorted(c for c in cuts if 0 < c < length), length]
    pieces = [ids[a:b] for a, b in zip(bounds, bounds[1:])]
    seen: dict[int, int] = {}
    for window in windows(pieces, context=context, stride=stride):
        assert len(window.inputs) <= context
        assert np.array_equal(window.ids, np.arange(window.begin, window.begin + len(window.ids)))
        for index in range(window.scored_from, len(window.targets)):
            position = int(window.targets[index])
            assert position not in seen, f"position {position} scored twice"
            seen[position] = index + 1  # the inputs before it in its window
    return seen


@given(length=st.integers(0, 80), context=st.integers(1, 20), data=st.data())
def test_every_position_is_scored_once_with_the_formulas_left_context(length, context, data):
    stride = data.draw(st.integers(1, context))
    cuts = data.draw(st.lists(st.integers(0, 80), max_size=6))
    seen = scored(length, context, stride, cuts)
    assert sorted(seen) == list(range(1, length))
    assert all(seen[p] == left_context(p, context, stride) for p in seen)
    assert all(seen[p] >= min(p, context - stride + 1) for p in seen)


def test_stride_equal_to_context_gives_non_overlapping_inputs():
    found = list(windows([list(range(23))], context=5, stride=5))
    assert [w.begin for w in found] == [0, 5, 10, 15, 20]
    assert [list(w.inputs) for w in found][:2] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert [w.scored_from for w in found] == [0, 0, 0, 0, 0]


def test_a_smaller_stride_scores_only_the_last_stride_targets_of_a_window():
    found = list(windows([list(range(12))], context=6, stride=2))
    assert [(w.begin, w.scored_from, len(w.targets)) for w in found] == [(0, 0, 6), (2, 4, 6), (4, 4, 6), (6, 4, 5)]


def test_the_windows_hold_no_more_than_a_piece_and_a_window():
    """Constant memory: the buffer a window is a view of never holds more than the latest piece and a context."""
    piece, context = 100, 16
    pieces = (list(range(start, start + piece)) for start in range(0, 100_000, piece))
    for window in windows(pieces, context=context, stride=8):
        assert window.ids.base is not None and len(window.ids.base) <= piece + context + 1
