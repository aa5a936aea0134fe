"""What the cache properties draw: a prefix, then the rest in chunks, as generation feeds a model.

Generation runs the prompt through the KV cache in one call at position 0, then one token (or a
chunk) at a time, each call starting where the last one ended. A ``CacheCase`` says where those
calls start and how many tokens each takes; the cache properties compare what the calls give with
one uncached call over every position. Imports no hypothesis (``cache_strategies`` draws them).
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs
from attrs import field, frozen

from blockspec.testing.cases import Case

ENCODERS = ("none", "rotary", "bias", "both")  # the reference encoders an attention component is decoded with


@frozen(kw_only=True)
class CacheCase(Case):
    """A Case whose ``start`` is the prefix (positions 0..start-1, one call) and whose ``chunks`` are the calls
    after it, in order (``tokens`` is their sum). ``encoder``: the reference encoder an attention component is
    decoded with (none, rotary, bias, or both)."""

    chunks: tuple[int, ...] = field(default=(1,), converter=tuple)
    encoder: str = "none"

    @property
    def length(self) -> int:
        """Every position the case covers: the prefix and the chunks."""
        return self.start + sum(self.chunks)

    def calls(self) -> Iterator[tuple[int, int]]:
        """(first, end) of each call: the prefix (when there is one), then each chunk."""
        if self.start:
            yield 0, self.start
        first = self.start
        for size in self.chunks:
            yield first, first + size
            first += size


def fitted(case: CacheCase, limit: int | None) -> CacheCase:
    """The case cut to positions 0..limit-1 (a bounded table): chunks kept from the front, the prefix shortened."""
    if limit is None or case.length <= limit:
        return case
    chunks, room = [], limit
    for size in case.chunks:
        if room <= 0:
            break
        chunks.append(min(size, room))
        room -= chunks[-1]
    start = min(case.start, limit - sum(chunks))
    return attrs.evolve(case, start=start, chunks=tuple(chunks), tokens=sum(chunks))
