"""Tracing costs nothing when not tracing: time model(ids) before and after a trace, and the trace itself.

Ratios against the untraced forward pass in the same run, never absolute thresholds:

    python benchmarks/trace_overhead.py [SPEC] [--tokens N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

import blockspec

ROOT = Path(__file__).resolve().parents[1]


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("spec", nargs="?", default=str(ROOT / "examples/specs/tiny-shakespeare.toml"))
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    spec = blockspec.load_spec(args.spec)
    model = blockspec.build(spec, seed=0).eval()
    ids = torch.randint(0, spec.model.vocab_size, (1, args.tokens), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = median_seconds(lambda: model(ids), args.repeats)
        traced = median_seconds(lambda: blockspec.trace(model, ids), args.repeats)
        after = median_seconds(lambda: model(ids), args.repeats)
    print(f"{spec.model.name}, N = {args.tokens}, median of {args.repeats}")
    print(f"forward before tracing   {before * 1e3:8.2f} ms  (1.00)")
    print(f"trace                    {traced * 1e3:8.2f} ms  ({traced / before:.2f}x the forward pass)")
    print(f"forward after tracing    {after * 1e3:8.2f} ms  ({after / before:.2f}x)")


if __name__ == "__main__":
    main()
