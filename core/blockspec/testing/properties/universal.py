"""Checks every component gets, whatever it promises: finite, deterministic, state_dict round trip."""

from __future__ import annotations

import torch

from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.harness import build_isolated, exercise, outputs
from blockspec.testing.properties.base import Property, assert_close


def check_finite(component: Component, case: Case, device: str) -> None:
    """Finite input in, finite output out."""
    built, _, found = _run(component, case, device)
    for name, tensor in found.items():
        if tensor is not None and not bool(torch.isfinite(tensor).all()):
            bad = (~torch.isfinite(tensor)).sum().item()
            raise AssertionError(f"{name}: {bad} of {tensor.numel()} values are not finite for finite input")


def check_deterministic(component: Component, case: Case, device: str) -> None:
    """Same seed, same weights; same input, same output, call after call."""
    first, tensors, found = _run(component, case, device)
    second = build_isolated(component, case, device=device)
    _same_state(first.module, second.module, "two builds under one seed")
    again = outputs(component.kind, second.module, case, tensors)
    for name, tensor in found.items():
        if tensor is not None:
            assert_close(again[name], tensor, f"{name} of a second build under the same seed", atol=0, rtol=0)


def check_state_dict_roundtrip(component: Component, case: Case, device: str) -> None:
    """Loading one build's state_dict into another build reproduces its outputs."""
    source, tensors, found = _run(component, case, device)
    target = build_isolated(component, case, seed=case.seed + 1, device=device)
    state = {key: value.clone() for key, value in source.module.state_dict().items()}
    target.module.load_state_dict(state, strict=True)
    _same_state(source.module, target.module, "after load_state_dict")
    reloaded = outputs(component.kind, target.module, case, tensors)
    for name, tensor in found.items():
        if tensor is not None:
            assert_close(reloaded[name], tensor, f"{name} after a state_dict round trip", atol=0, rtol=0)


def _run(component: Component, case: Case, device: str):
    return exercise(component, case, device)


def _same_state(first: torch.nn.Module, second: torch.nn.Module, what: str) -> None:
    a, b = first.state_dict(), second.state_dict()
    if set(a) != set(b):
        raise AssertionError(f"{what}: state_dict keys differ: {sorted(set(a) ^ set(b))}")
    for key in a:
        assert_close(b[key], a[key], f"{what}: state_dict[{key!r}]", atol=0, rtol=0)


UNIVERSAL = (
    Property(name="finite", summary="finite input gives finite output", check=check_finite),
    Property(name="deterministic", summary="same seed, same weights and outputs", check=check_deterministic),
    Property(name="state_dict", summary="state_dict round trip reproduces the outputs",
             check=check_state_dict_roundtrip),
)
