"""FFNs: (B, N, d) -> (B, N, d), each token on its own."""

from __future__ import annotations

import torch

from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.harness import exercise
from blockspec.testing.properties.base import Property, assert_close, assert_like, assert_shape


def check_contract(component: Component, case: Case, device: str) -> None:
    """(B, N, d) in, (B, N, d) out, same dtype and device."""
    _, (x,), found = exercise(component, case, device)
    assert_shape(found["output"], tuple(x.shape), "ffn output")
    assert_like(found["output"], x, "ffn output")


def check_position_wise(component: Component, case: Case, device: str) -> None:
    """Each token's output is what that token alone gives: no mixing across positions."""
    built, (x,), found = exercise(component, case, device)
    with torch.no_grad():
        alone = torch.cat([built.module(x[:, i:i + 1]) for i in range(x.shape[1])], dim=1)  # (B, N, d)
    assert_close(found["output"], alone, "outputs against each token run alone", atol=1e-5, rtol=1e-5)


FFN = (
    Property(name="contract", kind="ffn", check=check_contract, summary="(B, N, d) -> (B, N, d)"),
    Property(name="position_wise", kind="ffn", promise="position_wise", check=check_position_wise,
             summary="each token's output depends on that token alone"),
)
