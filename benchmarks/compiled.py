"""torch.compile(fullgraph=True) versus eager for a blockspec model: compile time and steady state."""

from __future__ import annotations

import time

import torch
import torch._inductor.config

import blockspec
from benchmarks.cases import Case
from benchmarks.graph_breaks import count_breaks
from benchmarks.timing import interleave, paired_ratio


def compare(case: Case, registry: blockspec.Registry, rounds: int) -> dict[str, object]:
    """First call of the compiled forward (no grad), then eager and compiled side by side."""
    spec = case.spec(registry)
    model = blockspec.build(spec, registry=registry, seed=0).eval()
    ids = torch.randint(0, spec.model.vocab_size, (case.batch, case.tokens))
    graphs, breaks, _ = count_breaks(model, ids)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):  # a cold compile, every run
        begin = time.perf_counter()
        compiled(ids)
        first_call = time.perf_counter() - begin
    with torch.no_grad():
        timings = interleave({"eager": lambda: model(ids), "compiled": lambda: compiled(ids)}, rounds=rounds)
        same = torch.allclose(model(ids), compiled(ids), atol=1e-4, rtol=1e-4)
    return {
        "graphs": graphs, "graph_breaks": breaks, "first_call_s": first_call, "matches_eager": bool(same),
        "timings": {name: t.as_dict() for name, t in timings.items()},
        "compiled_over_eager": timings["compiled"].median / timings["eager"].median,
        "compiled_over_eager_paired": paired_ratio(timings["compiled"], timings["eager"]),
    }
