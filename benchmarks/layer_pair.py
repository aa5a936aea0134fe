"""One layer against its Hugging Face peer on the same weights: forward and forward + backward, interleaved.

The per-layer benchmarks (moe.py, sinks.py, mla.py) check their pair computes the same function first,
then hand the two runs here: a training step of each before timing (the first backward in a process pays
for allocation, a cost of the order, not of the layer), then interleaved rounds, median ratios ours / HF.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch

from benchmarks.timing import interleave

Run = Callable[[torch.Tensor], torch.Tensor]  # inputs (B, N, d) -> the layer's output


def timed_pair(runs: dict[str, Run], x: torch.Tensor, rounds: int) -> dict:
    """``runs`` {"blockspec": ..., "hf": ...} on x: median ratios blockspec / HF and each one's median ms."""
    xg = x.clone().requires_grad_(True)

    def forward(run: Run) -> Callable[[], None]:
        def timed() -> None:
            with torch.no_grad():
                run(x)
        return timed

    def training(run: Run) -> Callable[[], None]:
        return lambda: run(xg).square().mean().backward()

    for run in runs.values():
        training(run)()
    fwd = interleave({name: forward(run) for name, run in runs.items()}, rounds=rounds)
    bwd = interleave({name: training(run) for name, run in runs.items()}, rounds=rounds)
    return {"forward_ratio": _ratio(fwd), "forward_backward_ratio": _ratio(bwd),
            "forward_ms": {k: 1e3 * t.median for k, t in fwd.items()},
            "forward_backward_ms": {k: 1e3 * t.median for k, t in bwd.items()}}


def _ratio(timings) -> float:
    """The median over rounds of blockspec's time / HF's time in the same round."""
    return statistics.median(a / b for a, b in zip(timings["blockspec"].samples, timings["hf"].samples))
