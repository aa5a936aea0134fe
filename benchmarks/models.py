"""The contenders of a case: blockspec, the reference and Hugging Face, on the same weights."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

import blockspec
from benchmarks.cases import Case
from benchmarks.peers import build_hf, build_reference

Run = Callable[[nn.Module, torch.Tensor], torch.Tensor]  # (model, ids (B, N)) -> logits (B, N, V)
CONTENDERS = ("blockspec", "reference", "hf")


def run_plain(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(ids)


def run_hf(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(ids, use_cache=False).logits  # no cache object: the leanest HF forward


def make_contenders(case: Case, registry: blockspec.Registry, only: str | None = None) -> dict[str, tuple[nn.Module, Run]]:
    """Each contender's model and how to call it; peers copy blockspec's weights unless built alone."""
    spec = case.spec(registry)
    if only == "reference":
        return {"reference": (build_reference(spec), run_plain)}
    if only == "hf":
        return {"hf": (build_hf(spec, case.hf_family), run_hf)}
    model = blockspec.build(spec, registry=registry, seed=0)
    if only == "blockspec":
        return {"blockspec": (model, run_plain)}
    return {
        "blockspec": (model, run_plain),
        "reference": (build_reference(spec, model), run_plain),
        "hf": (build_hf(spec, case.hf_family, model), run_hf),
    }
