"""Interleaved, repeated timing: every contender is measured in every round, in rotating order.

The machine is shared and noisy, so absolute times drift; contenders measured
side by side in the same rounds drift together, and their ratio holds still.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Timing:
    """Seconds per call over the rounds, with the summary the tables use."""

    samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    def as_dict(self) -> dict[str, float | int]:
        return {"median_s": self.median, "min_s": self.min, "max_s": self.max, "rounds": len(self.samples)}


def time_call(fn: Callable[[], object], repeat: int) -> float:
    """Mean seconds of ``repeat`` back-to-back calls."""
    begin = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - begin) / repeat


def calls_per_sample(seconds_per_call: float, target_s: float) -> int:
    """How many calls make one sample last about ``target_s`` (at least one)."""
    return max(1, round(target_s / max(seconds_per_call, 1e-6)))


def interleave(
    contenders: dict[str, Callable[[], object]],
    *,
    rounds: int,
    warmup: int = 2,
    target_s: float = 0.2,
) -> dict[str, Timing]:
    """Time each contender once per round, rotating the order so none always runs first.

    The last warm-up call also sizes the samples: cheap calls are repeated to last ``target_s``.
    """
    repeats = {name: calls_per_sample(_warm(fn, max(warmup, 1)), target_s) for name, fn in contenders.items()}
    timings = {name: Timing() for name in contenders}
    names = list(contenders)
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            timings[name].samples.append(time_call(contenders[name], repeats[name]))
    return timings


def _warm(fn: Callable[[], object], calls: int, budget_s: float = 2.0) -> float:
    """Up to ``calls`` warm-up calls, fewer when they are long (at least one); seconds of the last one."""
    spent, last = 0.0, 0.0
    for _ in range(calls):
        last = time_call(fn, 1)
        spent += last
        if spent > budget_s:
            break
    return last


def paired_ratio(numerator: Timing, denominator: Timing) -> float:
    """Median over rounds of the per-round ratio: robust to load that changes between rounds."""
    return statistics.median(a / b for a, b in zip(numerator.samples, denominator.samples, strict=True))
