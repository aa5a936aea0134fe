"""Activations: elementwise ones keep the width and compute each feature from itself; gated ones halve it."""

from __future__ import annotations

import torch

from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.harness import exercise, generator, normal
from blockspec.testing.properties.base import LEAK_DTYPES, LEAK_RTOL, Property, assert_like, assert_shape


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
    """Output feature j of token t comes from input feature j of token t alone: replacing one feature
    (at every token), or one token (every feature), changes nothing else of the output."""
    built, (u,), found = exercise(component, case, device)
    variants, changed = one_changed(u, case)  # (V, B, N, F) each
    with torch.no_grad():
        out = built.module(variants.flatten(0, 1)).view(variants.shape)  # (V·B, N, F) -> (V, B, N, F)
    kept = torch.where(changed, 0.0, out.double())
    expected = torch.where(changed, 0.0, found["output"].double().expand_as(out))
    if not torch.allclose(kept, expected, rtol=0, atol=LEAK_RTOL * max(expected.abs().max().item(), 1e-30)):
        raise AssertionError(_first_leak(kept, expected, u.shape[-1]))


def one_changed(u: torch.Tensor, case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """u (B, N, F) with one feature replaced (F variants), then with one token replaced (N variants):
    the inputs (V, B, N, F) and where each differs from u (V, B, N, F)."""
    b, n, f = u.shape
    other = normal(case, b, n, f, offset=7, device=str(u.device)) * 3.0  # (B, N, F)
    features = torch.eye(f, dtype=torch.bool, device=u.device)[:, None, None, :].expand(f, b, n, f)
    tokens = torch.eye(n, dtype=torch.bool, device=u.device)[:, None, :, None].expand(n, b, n, f)
    changed = torch.cat((features, tokens))  # (F + N, B, N, F)
    return torch.where(changed, other, u), changed


def _first_leak(kept: torch.Tensor, expected: torch.Tensor, width: int) -> str:
    """Which change moved which untouched output, in words."""
    diff = (kept - expected).abs()  # (V, B, N, F)
    v, _, t, j = (int(i) for i in torch.nonzero(diff == diff.max())[0])
    what = f"input feature {v}" if v < width else f"input token {v - width}"
    return (f"changing {what} changed output feature {j} of token {t} by {diff.max().item():.3g} "
            f"(an elementwise activation computes each feature from itself alone)")


def check_gated(component: Component, case: Case, device: str) -> None:
    """Takes 2·d_ff features and gives d_ff, whatever the flag says, in the half layout the FFN's and the
    experts' weights assume: output j reads input j (its gate) and j + d_ff (its value) and nothing else."""
    built, _, _ = exercise(component, case, device)
    wide = torch.randn(case.batch, case.tokens, 2 * case.model.d_ff, generator=generator(case, 8))
    with torch.no_grad():
        out = built.module(wide.to(device=device, dtype=getattr(torch, case.dtype)))
    assert_shape(out, (case.batch, case.tokens, case.model.d_ff), f"gated activation of width {wide.shape[-1]}")
    _check_half_layout(built.module, wide.to(device=device, dtype=out.dtype), case.model.d_ff)


def _check_half_layout(module: torch.nn.Module, wide: torch.Tensor, d_ff: int) -> None:
    """Moving input feature i changes no output but i mod d_ff (an interleaved split moves others)."""
    with torch.no_grad():
        base = module(wide)
        for i in range(2 * d_ff):
            moved = wide.clone()
            moved[..., i] += 1.0
            changed = (module(moved) - base).abs().flatten(0, -2).amax(dim=0) > 0  # (d_ff,)
            changed[i % d_ff] = False
            if bool(changed.any()):
                raise AssertionError(f"input feature {i} of {2 * d_ff} moved output features "
                                     f"{changed.nonzero().flatten().tolist()}: output j must read only features j "
                                     "(its gate) and j + d_ff (its value), the half layout the weights assume")


ACTIVATION = (
    Property(name="contract", kind="activation", check=check_contract,
             summary="gated flag matches the promise; output width d_ff"),
    Property(name="elementwise", kind="activation", promise="elementwise", check=check_elementwise,
             dtypes=LEAK_DTYPES, summary="output feature j of token t depends on input feature j of token t only"),
    Property(name="gated", kind="activation", promise="gated", check=check_gated,
             summary="2·d_ff -> d_ff"),
)
