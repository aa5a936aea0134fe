"""Activations: elementwise ones keep the width and commute with permutations; gated ones halve it."""

from __future__ import annotations

import torch

from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.harness import exercise, generator
from blockspec.testing.properties.base import Property, assert_close, assert_like, assert_shape


def check_contract(component: Component, case: Case, device: str) -> None:
    """The ``gated`` flag matches the promise, and d_ff (or 2·d_ff when gated) comes out as d_ff."""
    built, (u,), found = exercise(component, case, device)
    gated = bool(getattr(built.module, "gated", False))
    if ("gated" in component.promises) != gated:
        said = "promises" if "gated" in component.promises else "does not promise"
        raise AssertionError(f"{said} 'gated' but the module's gated flag is {gated}")
    if {"gated", "elementwise"} <= component.promises:
        raise AssertionError("promises both 'gated' and 'elementwise'")
    expected = (*u.shape[:-1], case.model.d_ff)
    assert_shape(found["output"], expected, f"activation of width {u.shape[-1]} (gated={gated})")
    assert_like(found["output"], u, "activation output")


def check_elementwise(component: Component, case: Case, device: str) -> None:
    """act(x[..., perm]) == act(x)[..., perm]: no feature looks at another."""
    built, (u,), found = exercise(component, case, device)
    perm = torch.randperm(u.shape[-1], generator=generator(case, 7)).to(u.device)
    with torch.no_grad():
        permuted = built.module(u[..., perm])
    assert_close(permuted, found["output"][..., perm], "act(x[..., perm]) vs act(x)[..., perm]",
                 atol=1e-6, rtol=1e-6)


def check_gated(component: Component, case: Case, device: str) -> None:
    """Takes 2·d_ff features and gives d_ff, whatever the flag says."""
    built, _, _ = exercise(component, case, device)
    wide = torch.randn(case.batch, case.tokens, 2 * case.model.d_ff, generator=generator(case, 8))
    with torch.no_grad():
        out = built.module(wide.to(device=device, dtype=getattr(torch, case.dtype)))
    assert_shape(out, (case.batch, case.tokens, case.model.d_ff), f"gated activation of width {wide.shape[-1]}")


ACTIVATION = (
    Property(name="contract", kind="activation", check=check_contract,
             summary="gated flag matches the promise; output width d_ff"),
    Property(name="elementwise", kind="activation", promise="elementwise", check=check_elementwise,
             summary="commutes with permuting features"),
    Property(name="gated", kind="activation", promise="gated", check=check_gated,
             summary="2·d_ff -> d_ff"),
)
