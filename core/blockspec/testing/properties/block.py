"""Blocks: one layer's wiring, (B, N, d) -> (B, N, d); the residual stream passes through untouched."""

from __future__ import annotations

import torch

from blockspec.modules.positional import PositionalEncoding
from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.harness import Built, build_isolated, exercise, inputs
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


def layer_parts(built: Built, names: tuple[str, ...]) -> dict[str, torch.nn.Module]:
    """The sublayers ``ctx.layer`` built for the block under ``names``: a promised wiring is checked with these,
    so a block that builds a norm of its own instead of the spec's [norm] breaks it."""
    made = built.layer.made if built.layer is not None else {}
    missing = [name for name in names if name not in made]
    if missing:
        raise AssertionError(f"ctx.layer built no {', '.join(missing)} for the block: the block runs sublayers "
                             f"of its own, not the spec's (it must build them through ctx.layer under those names)")
    return {name: made[name] for name in names}


def check_parallel(component: Component, case: Case, device: str) -> None:
    """A 'parallel' block is x + attn(norm1(x)) + ffn(norm2(x)), norm2 being norm1 where it has none, with the
    sublayers ctx.layer built."""
    built, (x,), found = exercise(component, case, device)
    part = layer_parts(built, ("attn", "ffn", "norm1"))
    norm2 = built.layer.made.get("norm2", part["norm1"]) if built.layer is not None else part["norm1"]
    with torch.no_grad():
        expected = x + part["attn"](part["norm1"](x), PositionalEncoding(), case.start) + part["ffn"](norm2(x))
    assert_close(found["output"], expected, "parallel block against its formula", atol=1e-5, rtol=1e-5)


def check_pre_norm(component: Component, case: Case, device: str) -> None:
    """A 'pre_norm' block is h + ffn(norm2(h)) with h = x + attn(norm1(x)), with the sublayers ctx.layer built."""
    built, (x,), found = exercise(component, case, device)
    part = layer_parts(built, PRE_POST_PARTS)
    with torch.no_grad():
        h = x + part["attn"](part["norm1"](x), PositionalEncoding(), case.start)
        expected = h + part["ffn"](part["norm2"](h))
    assert_close(found["output"], expected, "pre-norm block against its formula", atol=1e-5, rtol=1e-5)


def check_post_norm(component: Component, case: Case, device: str) -> None:
    """A 'post_norm' block is norm2(h + ffn(h)) with h = norm1(x + attn(x)), with the sublayers ctx.layer built."""
    built, (x,), found = exercise(component, case, device)
    part = layer_parts(built, PRE_POST_PARTS)
    with torch.no_grad():
        h = part["norm1"](x + part["attn"](x, PositionalEncoding(), case.start))
        expected = part["norm2"](h + part["ffn"](h))
    assert_close(found["output"], expected, "post-norm block against its formula", atol=1e-5, rtol=1e-5)


PRE_POST_PARTS = ("norm1", "attn", "norm2", "ffn")


BLOCK = (
    Property(name="contract", kind="block", check=check_contract, summary="(B, N, d) -> (B, N, d)"),
    Property(name="residual", kind="block", promise="residual", check=check_residual, weights="fresh",
             summary="with zero sublayers the block is the identity"),
    Property(name="causal", cases=sequence_cases, kind="block", promise="causal", check=check_causal,
             weights="trained", dtypes=LEAK_DTYPES,
             summary="outputs up to i ignore tokens after i"),
    Property(name="parallel", kind="block", promise="parallel", check=check_parallel,
             summary="x + attn(norm1(x)) + ffn(norm2(x))"),
    Property(name="pre_norm", kind="block", promise="pre_norm", check=check_pre_norm,
             summary="h + ffn(norm2(h)), h = x + attn(norm1(x))"),
    Property(name="post_norm", kind="block", promise="post_norm", check=check_post_norm,
             summary="norm2(h + ffn(h)), h = norm1(x + attn(x))"),
)
