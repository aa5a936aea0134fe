"""Graph breaks under torch.compile for every first-party positional x norm x activation combination.

Used by the benchmark (a table) and by an opt-in slow test (an assertion).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

import blockspec

FIRST_PARTY = ("blockspec-positional", "blockspec-norms", "blockspec-activations")
KINDS = ("positional", "norm", "activation")

TINY = """
[model]
vocab_size = 97
context_length = 32
d_model = 32
n_layers = 2
n_heads = 4
n_kv_heads = {kv}
d_ff = 64
norm_placement = "{placement}"
dropout = {dropout}

[positional]
use = "{positional}"

[norm]
use = "{norm}"

[activation]
use = "{activation}"

[head]
use = "lm"
"""


@dataclass(frozen=True)
class Combo:
    positional: str
    norm: str
    activation: str

    @property
    def label(self) -> str:
        return f"{self.positional}/{self.norm}/{self.activation}"


def first_party_combos(registry: blockspec.Registry) -> list[Combo]:
    """Every combination of the first-party components the registry holds."""
    names = [[c.name for c in registry if c.kind == kind and c.distribution in FIRST_PARTY] for kind in KINDS]
    return [Combo(*combo) for combo in itertools.product(*names)]


def tiny_spec(combo: Combo, registry: blockspec.Registry, *, kv: int = 2, placement: str = "pre",
              dropout: float = 0.0) -> blockspec.ModelSpec:
    text = TINY.format(kv=kv, placement=placement, dropout=dropout, **vars(combo))
    return blockspec.loads_spec(text, registry, file=f"<{combo.label}>")


def count_breaks(model: torch.nn.Module, ids: torch.Tensor, **kwargs) -> tuple[int, int, list[str]]:
    """(graphs, graph breaks, reasons) of one forward, from torch._dynamo.explain."""
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(ids, **kwargs)
    reasons = [str(getattr(b, "reason", b)) for b in explained.break_reasons]
    return explained.graph_count, explained.graph_break_count, reasons


def check_combo(combo: Combo, registry: blockspec.Registry, *, training: bool = False) -> dict[str, object]:
    """Graph count and breaks of one combination's forward (eval, or train with dropout)."""
    spec = tiny_spec(combo, registry, dropout=0.1 if training else 0.0)
    model = blockspec.build(spec, registry=registry, seed=0).train(training)
    ids = torch.randint(0, spec.model.vocab_size, (2, 16))
    graphs, breaks, reasons = count_breaks(model, ids)
    return {"combo": combo.label, "training": training, "graphs": graphs, "breaks": breaks, "reasons": reasons}
