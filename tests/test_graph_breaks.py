"""torch.compile(fullgraph=True) sees one graph for every first-party positional x norm x activation (slow: opt-in)."""

from __future__ import annotations


import pytest
import torch

import blockspec
from benchmarks.graph_breaks import Combo, check_combo, first_party_combos, tiny_spec

pytestmark = pytest.mark.slow


def test_every_first_party_combination_is_listed(registry):
    combos = first_party_combos(registry)
    assert len(combos) == 3 * 2 * 5
    assert Combo("rope", "rmsnorm", "swiglu") in combos


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train-dropout"])
def test_no_graph_breaks(registry, training):
    found = [check_combo(combo, registry, training=training) for combo in first_party_combos(registry)]
    broken = [(f["combo"], f["graphs"], f["reasons"]) for f in found if f["breaks"] or f["graphs"] != 1]
    assert broken == []


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_fullgraph_compile_runs_and_matches_eager(registry, placement):
    """One real fullgraph compile per block style (inductor), forward and backward."""
    spec = tiny_spec(Combo("rope", "rmsnorm", "swiglu"), registry, placement=placement)
    model = blockspec.build(spec, registry=registry, seed=0)
    ids = torch.randint(0, spec.model.vocab_size, (2, 16))
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    torch.testing.assert_close(compiled(ids), model(ids), atol=1e-4, rtol=1e-4)
    compiled(ids).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
