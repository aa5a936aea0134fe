"""Deferred initialisation: skipping work must never change what construction produces."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import blockspec
from blockspec.assembly import assemble
from blockspec.assembly.assemble import build_unfilled
from blockspec.assembly.deferred_init import DeferredInit

from .specs import spec_text

SPEC = spec_text(vocab_size=50, context_length=16, d_model=32, n_layers=2, n_heads=4, d_ff=64,
                 positional="{positional}", activation="swiglu")


class InitThenScale(nn.Module):
    """Initialises a parameter, then changes it in place: the change must survive deferral."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.empty(8))
        nn.init.normal_(self.scale)
        with torch.no_grad():
            self.scale.mul_(0).add_(3)
        self.derived = nn.Parameter(torch.empty(8))
        nn.init.uniform_(self.derived)
        self.register_buffer("copy_of_derived", self.derived.detach().clone())


def test_a_tensor_used_during_construction_is_initialised_first():
    with DeferredInit() as deferred:
        module = InitThenScale()
        padded = nn.Embedding(10, 4, padding_idx=2)
    deferred.finish()
    assert torch.equal(module.scale, torch.full((8,), 3.0))
    assert torch.equal(module.copy_of_derived, module.derived)
    assert (module.derived >= 0).all() and (module.derived <= 1).all()
    assert torch.equal(padded.weight[2], torch.zeros(4)) and padded.weight[3].abs().sum() > 0


def test_finish_runs_the_waiting_calls_in_order_and_skips_overwritten_tensors():
    with DeferredInit() as deferred:
        kept, skipped = torch.empty(5), torch.full((5,), 7.0)
        nn.init.constant_(kept, 1.0)
        nn.init.constant_(kept, 2.0)
        nn.init.constant_(skipped, 1.0)
        assert deferred.calls, "the init calls were run, not recorded"
    deferred.finish(overwritten=[skipped])
    assert torch.equal(kept, torch.full((5,), 2.0))
    assert torch.equal(skipped, torch.full((5,), 7.0))


def test_seeded_random_init_is_reproducible_under_deferral():
    def make() -> nn.Linear:
        torch.manual_seed(0)
        with DeferredInit() as deferred:
            layer = nn.Linear(6, 3)
        deferred.finish()
        return layer

    first, second = make(), make()
    assert torch.equal(first.weight, second.weight) and torch.equal(first.bias, second.bias)
    assert first.weight.abs().max() <= 1 / 6**0.5  # Kaiming-uniform's bound: the default init did run


@pytest.mark.parametrize("defer_from", [0, 10**12], ids=["deferred", "eager"])
def test_build_keeps_what_gpt2_init_does_not_touch(registry, monkeypatch, defer_from):
    monkeypatch.setattr(assemble, "DEFER_FROM_PARAMETERS", defer_from)
    spec = blockspec.loads_spec(SPEC.format(positional="learned"), registry)
    model = blockspec.build(spec, registry=registry, seed=0)
    for name, tensor in model.named_parameters():
        if ".norm" in name or name.startswith("final_norm"):
            expected = torch.ones_like(tensor) if name.endswith("weight") else torch.zeros_like(tensor)
            assert torch.equal(tensor, expected), name
        elif name.endswith("bias"):
            assert torch.equal(tensor, torch.zeros_like(tensor)), name
        else:
            assert 0.004 < tensor.std() < 0.03, name  # N(0, 0.02), residual projections / sqrt(2L)


def test_unfilled_model_computes_its_position_tables(registry):
    for positional in ("sinusoidal", "rope"):
        spec = blockspec.loads_spec(SPEC.format(positional=positional), registry)
        eager, unfilled = blockspec.build(spec, registry=registry), build_unfilled(spec, registry=registry)
        persistent = set(eager.state_dict())
        computed = {n: b for n, b in eager.named_buffers() if n not in persistent}
        assert computed, positional
        for name, buffer in computed.items():
            assert torch.equal(unfilled.get_buffer(name), buffer), name


def test_unfilled_model_loads_to_the_same_logits(registry):
    spec = blockspec.loads_spec(SPEC.format(positional="rope"), registry)
    source = blockspec.build(spec, registry=registry, seed=1).eval()
    target = build_unfilled(spec, registry=registry).eval()
    target.load_state_dict(source.state_dict())
    ids = torch.randint(0, 50, (2, 16))
    assert torch.equal(target(ids), source(ids))
