"""Checks every component gets, whatever it promises: finite, deterministic, state_dict round trip, dtypes."""

from __future__ import annotations

import copy

import attrs
import torch

from blockspec.registry.components import Component
from blockspec.testing.cases import ALL_DTYPES, Case
from blockspec.testing.harness import (
    assume, build_isolated, dtype_of, exercise, fits, generator, inputs, outputs, trained_state,
)
from blockspec.testing.properties.base import Property, assert_close, assert_like

# How far a low-precision output may stray from the float64 computation with the same weights and inputs:
# the norm of the difference over the norm of the float64 output. A wrong result is off by ~1 (bfloat16
# positions: 1.7); the first-party components stay below a fifth of these over 300 examples.
DTYPE_TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "float16": 5e-2, "bfloat16": 2e-1}
ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}  # unit roundoff: half an ulp at 1
FAR_START = 1000  # bfloat16 holds integers exactly only up to 256: positions kept in the input's dtype show here
CONDITIONING = 30  # the tolerance is at least this many times how far the float64 outputs move under rounding


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


def check_dtypes(component: Component, case: Case, device: str) -> None:
    """In each of float32, float64, bfloat16 and float16: after ``.to(dtype)`` and a forward pass every floating
    parameter and persistent buffer is in that dtype; inputs in it give outputs in it, finite, and (but for
    routed mixtures) within the dtype's precision of the float64 module on the same inputs. Non-persistent
    buffers (derived tables) may keep a precision of their own."""
    reference = build_isolated(component, attrs.evolve(case, dtype="float64"), device=device).module
    assume(fits(reference, case), f"{case.tokens} tokens do not fit the encoder's max_positions")
    for dtype in ALL_DTYPES:
        for start in _starts(component, case, dtype):
            _check_dtype(component, attrs.evolve(case, dtype=dtype, start=start), reference, device)


def _starts(component: Component, case: Case, dtype: str) -> tuple[int, ...]:
    """The drawn start, and for an unbounded encoder in a half dtype one far out too, whatever the draw."""
    if "unbounded" in component.promises and dtype in ("bfloat16", "float16"):
        return case.start, case.start + FAR_START
    return (case.start,)


def _check_dtype(component: Component, case: Case, reference: torch.nn.Module, device: str) -> None:
    module = copy.deepcopy(reference).to(dtype_of(case))
    tensors = inputs(component.kind, module, case, device)
    found = outputs(component.kind, module, case, tensors)
    stray = [f"{name} ({t.dtype})" for name, t in trained_state(module).items() if t.dtype != dtype_of(case)]
    if stray:
        raise AssertionError(f"after .to({dtype_of(case)}) these stay in another dtype: {', '.join(stray)}")
    for name, tensor in found.items():
        if tensor is not None:
            assert_like(tensor, tensors[0], f"{name} for {case.dtype} input")
            if not bool(torch.isfinite(tensor).all()):
                raise AssertionError(f"{name}: not finite in {case.dtype} for standard normal input")
    if "mixture" not in component.promises:  # top-k routing may flip between precisions: no value check
        wide = attrs.evolve(case, dtype="float64")
        doubled = tuple(t.double() for t in tensors)
        expected = outputs(component.kind, reference, wide, doubled)
        allowed = max(DTYPE_TOLERANCE[case.dtype],
                      CONDITIONING * _sensitivity(component, reference, case, doubled, expected))
        _check_precision(case.dtype, found, expected, allowed)


def _sensitivity(component: Component, reference: torch.nn.Module, case: Case, doubled, expected: dict) -> float:
    """How far the float64 outputs move when the inputs, parameters and persistent buffers are jittered by the
    dtype's rounding: an ill-conditioned computation (a LayerNorm of a near-constant vector) moves that far
    in any implementation, so the tolerance grows with it; a well-conditioned one keeps the dtype's own."""
    roundoff = ROUNDOFF.get(case.dtype, 0.0)
    if not roundoff:
        return 0.0
    gen = generator(case, 17)
    jittered = copy.deepcopy(reference)
    with torch.no_grad():
        for tensor in trained_state(jittered).values():
            tensor.mul_(1 + roundoff * torch.randn(tensor.shape, generator=gen, dtype=torch.float64).to(tensor))
    moved = tuple(t * (1 + roundoff * torch.randn(t.shape, generator=gen, dtype=torch.float64).to(t))
                  for t in doubled)
    found = outputs(component.kind, jittered, attrs.evolve(case, dtype="float64"), moved)
    return max((_relative(t, expected[name]) for name, t in found.items() if t is not None), default=0.0)


RMS_FLOOR = 0.1  # outputs smaller than this (root mean square) are compared absolutely, at this scale


def _relative(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """||actual - expected|| / max(||expected||, RMS_FLOOR·√n), in float64: relative for outputs of the inputs'
    order (standard normal), absolute for tiny ones, whose relative error in half precision means nothing (a
    norm of a vector that GELU flattened to 1e-24 in float64 and to 1e-5 in bfloat16)."""
    expected = expected.double()
    floor = RMS_FLOOR * max(expected.numel(), 1) ** 0.5
    return ((actual.double() - expected).norm() / expected.norm().clamp_min(floor)).item()


def _check_precision(dtype: str, found: dict, reference: dict, allowed: float) -> None:
    """Each output within ``allowed`` of the float64 one, as a relative norm."""
    for name, tensor in found.items():
        if tensor is None:
            continue
        error = _relative(tensor, reference[name])
        if error > allowed:
            raise AssertionError(f"{name} in {dtype} is {error:.3g} (relative norm) from the float64 computation "
                                 f"with the same weights and inputs; {dtype} allows {allowed:.3g} here")


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
    Property(name="dtypes", check=check_dtypes,
             summary="in float32/64, bfloat16, float16: parameters follow .to(); outputs keep the dtype, are finite "
                     "and near the float64 ones"),
)
