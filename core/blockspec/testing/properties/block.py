"""Blocks: one layer's wiring, (B, N, d) -> (B, N, d); the residual stream passes through untouched."""

from __future__ import annotations

import torch

from blockspec.modules.positional import PositionalEncoding
from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.harness import build_isolated, exercise, inputs
from blockspec.testing.properties.base import (
    LEAK_DTYPES, Property, assert_close, assert_like, assert_shape, sequence_cases,
)
from blockspec.testing.properties.attention import check_causal  # a block is causal as its attention is


def check_contract(component: Component, case: Case, device: str) -> None:
    """(B, N, d) in, (B, N, d) out, same dtype and device, with the kit's reference sublayers."""
    _, (x,), found = exercise(component, case, device)
    assert_shape(found["output"], tuple(x.shape), "block output")
    assert_like(found["output"], x, "block output")


def check_residual(component: Component, case: Case, device: str) -> None:
    """With attention and FFN that output zero (and freshly built LayerNorms), block(x) == x."""
    built = build_isolated(component, case, device=device, zero_sublayers=True)
    (x,) = inputs(component.kind, built.module, case, device)
    with torch.no_grad():
        out = built.module(x, PositionalEncoding(), case.start)
    assert_close(out, x, "block output with zero sublayers", atol=1e-6, rtol=0)


def check_parallel(component: Component, case: Case, device: str) -> None:
    """A 'parallel' block is x + attn(norm1(x)) + ffn(norm2(x)), norm2 being norm1 where it has none."""
    built, (x,), found = exercise(component, case, device)
    block, positional = built.module, PositionalEncoding()
    norm2 = block.norm2 if hasattr(block, "norm2") else block.norm1
    with torch.no_grad():
        expected = x + block.attn(block.norm1(x), positional, case.start) + block.ffn(norm2(x))
    assert_close(found["output"], expected, "parallel block against its formula", atol=1e-5, rtol=1e-5)


BLOCK = (
    Property(name="contract", kind="block", check=check_contract, summary="(B, N, d) -> (B, N, d)"),
    Property(name="residual", kind="block", promise="residual", check=check_residual, weights="fresh",
             summary="with zero sublayers the block is the identity"),
    Property(name="causal", cases=sequence_cases, kind="block", promise="causal", check=check_causal,
             weights="trained", dtypes=LEAK_DTYPES,
             summary="outputs up to i ignore tokens after i"),
    Property(name="parallel", kind="block", promise="parallel", check=check_parallel,
             summary="x + attn(norm1(x)) + ffn(norm2(x))"),
)
