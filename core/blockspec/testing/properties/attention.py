"""Attention: (B, N, d) -> (B, N, d); causal ones never look ahead."""

from __future__ import annotations

import torch

from blockspec.modules.positional import PositionalEncoding
from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.errors import NotApplicable
from blockspec.testing.harness import exercise, normal
from blockspec.testing.properties.base import Property, assert_close, assert_like, assert_shape, sequence_cases


def check_contract(component: Component, case: Case, device: str) -> None:
    """(B, N, d) in, (B, N, d) out, same dtype and device."""
    _, (x,), found = exercise(component, case, device)
    assert_shape(found["output"], tuple(x.shape), "attention output")
    assert_like(found["output"], x, "attention output")


def check_causal(component: Component, case: Case, device: str) -> None:
    """Changing tokens after position i leaves the outputs at 0..i unchanged."""
    built, (x,), found = exercise(component, case, device)
    changed = x.clone()
    tail = normal(case, case.batch, case.tokens, case.model.d_model, offset=11, device=device)
    changed[:, case.cut + 1:] = tail[:, case.cut + 1:]  # (B, N, d): positions after cut replaced
    with torch.no_grad():
        out = built.module(changed, PositionalEncoding(), case.start)
    keep = case.cut + 1
    assert_close(out[:, :keep], found["output"][:, :keep],
                 f"outputs at 0..{case.cut} after changing positions {keep}..", atol=1e-5, rtol=1e-5)


def check_weights(component: Component, case: Case, device: str) -> None:
    """Every head's weights: row 0 is [1, 0, ..., 0], nothing above the diagonal, rows sum to 1."""
    built, (x,), _ = exercise(component, case, device)
    module = built.module
    if not (hasattr(module, "project") and hasattr(module, "weights")):
        raise NotApplicable("the module exposes no project()/weights() to read attention weights from")
    with torch.no_grad():
        q, k, _ = module.project(x, PositionalEncoding(), case.start)
        weights = module.weights(q, k).double()  # (B, h, N, N)
    first = torch.zeros_like(weights[..., 0, :])
    first[..., 0] = 1.0
    assert_close(weights[..., 0, :], first, "first row of the attention weights", atol=1e-6, rtol=0)
    above = weights.triu(diagonal=1)
    assert_close(above, torch.zeros_like(above), "attention weights above the diagonal", atol=0, rtol=0)
    assert_close(weights.sum(-1), torch.ones_like(weights[..., 0]), "row sums", atol=1e-5, rtol=0)


ATTENTION = (
    Property(name="contract", kind="attention", check=check_contract, summary="(B, N, d) -> (B, N, d)"),
    Property(name="causal", cases=sequence_cases, kind="attention", promise="causal", check=check_causal,
             summary="outputs up to i ignore tokens after i"),
    Property(name="weights", kind="attention", promise="causal", check=check_weights,
             summary="row 0 is [1, 0, ...], no weight above the diagonal"),
)
