"""Norms: [..., d] -> [..., d]; scale and shift invariance; what a fresh norm outputs."""

from __future__ import annotations

import torch

from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.harness import build_isolated, exercise, normal
from blockspec.testing.properties.base import Property, assert_close, assert_like, assert_shape, promised_option

TOLERANCE = dict(atol=1e-4, rtol=1e-4)


def spread_tokens(case: Case, device: str) -> torch.Tensor:
    """(B, N, d) tokens with variance between 1 and 4 and a mean in [-2, 2], so eps stays negligible.

    Random tokens can be nearly constant at small d, where every real norm is eps-dominated.
    """
    b, n, d = case.batch, case.tokens, case.model.d_model
    raw = normal(case, b, n, d, device=device).double()
    centred = raw - raw.mean(-1, keepdim=True)
    unit = centred / centred.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-12)  # variance 1 per token
    spread = 1 + normal(case, b, n, 1, offset=3, device=device).double().abs().clamp(max=1)
    offset = normal(case, b, n, 1, offset=4, device=device).double().clamp(-2, 2)
    return (unit * spread + offset).to(getattr(torch, case.dtype))


def _norm(component: Component, case: Case, device: str):
    module = build_isolated(component, case, device=device).module
    x = spread_tokens(case, device)
    with torch.no_grad():
        return module, x, module(x)


def check_contract(component: Component, case: Case, device: str) -> None:
    """[..., d] in, the same shape, dtype and device out."""
    _, (x,), found = exercise(component, case, device)
    assert_shape(found["output"], tuple(x.shape), "norm(x)")
    assert_like(found["output"], x, "norm(x)")


def check_scale_invariant(component: Component, case: Case, device: str) -> None:
    """norm(c·x) == norm(x) for c > 0 (here c = case.factor)."""
    module, x, y = _norm(component, case, device)
    with torch.no_grad():
        scaled = module(case.factor * x)
    assert_close(scaled, y, f"norm({case.factor:g}·x) vs norm(x)", **TOLERANCE)


def check_shift_invariant(component: Component, case: Case, device: str) -> None:
    """norm(x + s) == norm(x) for a constant s per token (here s = case.factor · a normal draw)."""
    module, x, y = _norm(component, case, device)
    shift = case.factor * normal(case, case.batch, case.tokens, 1, offset=5, device=device)
    with torch.no_grad():
        shifted = module(x + shift)
    assert_close(shifted, y, "norm(x + s) vs norm(x)", **TOLERANCE)


def check_standardizes(component: Component, case: Case, device: str) -> None:
    """A fresh norm (γ = 1, β = 0) gives every token mean 0 and variance 1."""
    _, _, y = _norm(component, case, device)
    y = y.double()
    assert_close(y.mean(-1), torch.zeros_like(y[..., 0]), "per-token mean", atol=1e-4, rtol=0)
    assert_close(y.var(-1, unbiased=False), torch.ones_like(y[..., 0]), "per-token variance", atol=1e-3, rtol=0)


def check_unit_rms(component: Component, case: Case, device: str) -> None:
    """A fresh norm gives every token root mean square 1."""
    _, _, y = _norm(component, case, device)
    rms = y.double().pow(2).mean(-1).sqrt()
    assert_close(rms, torch.ones_like(rms), "per-token root mean square", atol=1e-3, rtol=0)


def check_offset_init(component: Component, case: Case, device: str) -> None:
    """With the promised offset on: the stored weight w starts at 0 (the scale 1 + w at 1) and tokens come out
    at RMS 1."""
    from blockspec.testing.harness import assume

    assume(bool(promised_option(component, case, "offset_init")), "the config's offset is off")
    module, _, y = _norm(component, case, device)
    weight = getattr(module, "weight", None)
    if weight is not None:
        assert_close(weight, torch.zeros_like(weight), "the offset norm's weight at init", atol=0, rtol=0)
    rms = y.double().pow(2).mean(-1).sqrt()
    assert_close(rms, torch.ones_like(rms), "per-token root mean square", atol=1e-3, rtol=0)


NORM = (
    Property(name="contract", kind="norm", check=check_contract, summary="[..., d] -> [..., d], dtype and device kept"),
    Property(name="scale_invariant", kind="norm", promise="scale_invariant", check=check_scale_invariant,
             summary="norm(c·x) == norm(x) for c > 0"),
    Property(name="shift_invariant", kind="norm", promise="shift_invariant", check=check_shift_invariant,
             summary="norm(x + s) == norm(x)"),
    Property(name="standardizes", kind="norm", promise="standardizes", check=check_standardizes, weights="fresh",
             summary="fresh: mean 0, variance 1 per token"),
    Property(name="unit_rms", kind="norm", promise="unit_rms", check=check_unit_rms, weights="fresh",
             summary="fresh: root mean square 1 per token"),
    Property(name="offset_init", kind="norm", promise="offset_init", check=check_offset_init, weights="fresh",
             summary="with offset = true: (1 + w) with w = 0 at init, RMS 1 per token"),
)
