"""Forward, forward + backward and build time of the three contenders, interleaved, plus achieved GFLOP/s."""

from __future__ import annotations

import torch
from torch import nn

import blockspec
from benchmarks.cases import Case, reference_config
from benchmarks.models import make_contenders
from benchmarks.peers import build_hf
from benchmarks.reference import Reference
from benchmarks.timing import Timing, interleave, paired_ratio

MATMUL_SIZE = 2048


def matmul_gflops(rounds: int) -> Timing:
    """fp32 (2048 x 2048) @ (2048 x 2048): the machine's reachable throughput."""
    a, b = torch.randn(MATMUL_SIZE, MATMUL_SIZE), torch.randn(MATMUL_SIZE, MATMUL_SIZE)
    return interleave({"matmul": lambda: torch.mm(a, b)}, rounds=rounds)["matmul"]


def matmul_flops() -> int:
    return 2 * MATMUL_SIZE**3


def forward_flops(model: nn.Module, spec: blockspec.ModelSpec, batch: int, tokens: int) -> int:
    """2 flops per weight per token for every matrix multiply, plus causal-agnostic attention 4·L·N²·d per sequence."""
    matrices = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    head = spec.model.vocab_size * spec.model.d_model if spec.head.name == "lm" and spec.head.config.tied else 0
    attention = 4 * spec.model.n_layers * tokens * tokens * spec.model.d_model
    return batch * (2 * tokens * (matrices + head) + attention)


def _train_step(model: nn.Module, run, ids: torch.Tensor):
    def step() -> None:
        model.zero_grad(set_to_none=True)
        logits = run(model, ids)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()

    return step


def compare(case: Case, registry: blockspec.Registry, rounds: int) -> dict[str, object]:
    """Forward (no grad, eval) and forward + backward (train), blockspec versus the peers."""
    spec = case.spec(registry)
    contenders = make_contenders(case, registry)
    ids = torch.randint(0, spec.model.vocab_size, (case.batch, case.tokens))
    with torch.no_grad():
        for model, _ in contenders.values():
            model.eval()
        forward = interleave({n: (lambda m=m, r=r: r(m, ids)) for n, (m, r) in contenders.items()}, rounds=rounds)
    for model, _ in contenders.values():
        model.train()
    backward = interleave({n: _train_step(m, r, ids) for n, (m, r) in contenders.items()}, rounds=rounds)
    flops = forward_flops(contenders["blockspec"][0], spec, case.batch, case.tokens)
    return {"forward": _summary(forward), "forward_backward": _summary(backward),
            "forward_flops": flops, "train_flops": 3 * flops}


def _summary(timings: dict[str, Timing]) -> dict[str, object]:
    mine = timings["blockspec"]
    return {
        "timings": {name: t.as_dict() for name, t in timings.items()},
        "ratios": {peer: mine.median / t.median for peer, t in timings.items() if peer != "blockspec"},
        "ratios_paired": {peer: paired_ratio(mine, t) for peer, t in timings.items() if peer != "blockspec"},
        "ratios_min": {peer: mine.min / t.min for peer, t in timings.items() if peer != "blockspec"},
    }


def build_times(case: Case, registry: blockspec.Registry, rounds: int) -> dict[str, object]:
    """ModelSpec -> initialised blockspec model, versus constructing the reference (same init) and HF.

    Reading the TOML file into a ModelSpec is timed on its own: the reference's config is a Python object too.
    """
    spec = case.spec(registry)
    config = reference_config(spec)
    contenders = {
        "blockspec": lambda: blockspec.build(spec, registry=registry, seed=0),
        "reference": lambda: Reference(config),
        "hf": lambda: build_hf(spec, case.hf_family),
    }
    summary = _summary(interleave(contenders, rounds=rounds, warmup=1))
    summary["load_spec"] = interleave({"load_spec": lambda: case.spec(registry)}, rounds=rounds)["load_spec"].as_dict()
    return summary
