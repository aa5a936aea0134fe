"""Refusals and size constraints (issue 27, item 3): a build's ValueError/TypeError makes a draw no example; a
component's ``serves`` constraint is all the kit draws and all the assembler builds; a component that serves
nothing the kit draws could not be checked, and is never passed."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

import blockspec
from blockspec import SpecError
from blockspec.assembly.builtin import CausalAttentionConfig, build_causal_attention
from blockspec.errors import RegistrationError
from blockspec.modules.attention import CausalSelfAttention
from blockspec.plugin import hookimpl
from blockspec.registry.components import Component, validate_component
from blockspec.spec.schema import ModelConfig
from blockspec.testing import check, verify
from blockspec.testing.properties import find
from blockspec.testing.reference import solo_spec
from blockspec.testing.refusals import GIVE_UP_AFTER

DISTRIBUTION = "sizes"
SEEN: dict[str, list[int]] = {"served": []}  # n_heads of every build of attention:served


def even_heads(model: ModelConfig) -> bool:
    """n_heads even"""
    return model.n_heads % 2 == 0


def no_drawn_size(model: ModelConfig) -> bool:
    """n_heads above 100"""
    return model.n_heads > 100


def odd_refused(config: CausalAttentionConfig, ctx):
    if not even_heads(ctx.model):
        raise ValueError(f"n_heads must be even, found {ctx.model.n_heads}")
    return build_causal_attention(config, ctx)


def served(config: CausalAttentionConfig, ctx):
    SEEN["served"].append(ctx.model.n_heads)
    return build_causal_attention(config, ctx)


def never(config: CausalAttentionConfig, ctx):
    raise TypeError("this build serves no size at all")


class ForwardValueError(CausalSelfAttention):
    def forward(self, x, positional, start=0, cache=None):
        raise ValueError("forward refuses: a bug, not a refusal")


def forward_error(config: CausalAttentionConfig, ctx) -> ForwardValueError:
    m = ctx.model
    return ForwardValueError(d_model=m.d_model, n_heads=m.n_heads, n_kv_heads=m.kv_heads, bias=m.bias,
                             dropout=m.dropout, head_dim=m.head_dim)


@hookimpl
def blockspec_register(register) -> None:
    causal = ("causal",)
    register("attention", "odd_refused", CausalAttentionConfig, odd_refused, promises=causal)
    register("attention", "served", CausalAttentionConfig, served, promises=causal, serves=even_heads)
    register("attention", "never", CausalAttentionConfig, never, promises=causal)
    register("attention", "none_served", CausalAttentionConfig, build_causal_attention, promises=causal,
             serves=no_drawn_size)
    register("attention", "forward_error", CausalAttentionConfig, forward_error, promises=causal)


@pytest.fixture(scope="module")
def sizes() -> blockspec.Registry:
    plugin = SimpleNamespace(blockspec_register=blockspec_register)
    return blockspec.load_registry(plugins=[(plugin, DISTRIBUTION, "0")], entry_points=False, probe=False)


def _check(registry, name: str, prop: str, **kwargs):
    return check(registry.get("attention", name, DISTRIBUTION), find(prop, "attention"), **kwargs)


@pytest.mark.parametrize("prop", ["causal", "model_causal"])
def test_a_build_that_refuses_odd_head_counts_passes(sizes, prop):
    assert _check(sizes, "odd_refused", prop).status == "passed"


def test_the_kit_draws_only_sizes_the_constraint_serves(sizes):
    SEEN["served"].clear()
    assert _check(sizes, "served", "causal").status == "passed"
    assert SEEN["served"] and all(n % 2 == 0 for n in SEEN["served"])


@pytest.mark.parametrize("prop", ["contract", "causal", "model_shapes", "model_parameters"])
def test_a_build_that_refuses_every_size_could_not_be_checked_never_passed(sizes, prop):
    result = _check(sizes, "never", prop)
    assert result.status == "could not check"
    assert "the build refused every drawn size" in result.message
    assert "TypeError: this build serves no size at all" in result.message and "ModelConfig(" in result.message


def test_every_property_of_a_build_that_refuses_everything_is_unchecked_or_not_promised(sizes):
    statuses = {r.property: r.status for r in verify([sizes.get("attention", "never", DISTRIBUTION)])}
    assert set(statuses.values()) == {"could not check", "not applicable"}
    assert statuses["causal"] == "could not check"


def test_a_constraint_that_serves_no_drawn_size_could_not_be_checked(sizes):
    result = _check(sizes, "none_served", "causal")
    assert result.status == "could not check"
    assert f"none of {GIVE_UP_AFTER} drawn sizes is one it serves (n_heads above 100)" in result.message


def test_an_error_raised_by_forward_stays_a_failure(sizes):
    result = _check(sizes, "forward_error", "contract", max_examples=3)
    assert result.status == "failed"
    assert "raised ValueError: forward refuses" in result.message


def test_the_assembler_refuses_sizes_a_component_does_not_serve_in_one_line(sizes):
    component = sizes.get("attention", "served", DISTRIBUTION)
    odd = ModelConfig(name="m", vocab_size=5, context_length=4, d_model=12, n_layers=1, n_heads=3, d_ff=8)
    spec, registry = solo_spec(component, CausalAttentionConfig(), odd)
    with pytest.raises(SpecError) as caught:
        blockspec.build(spec, registry=registry)
    text = str(caught.value)
    assert "sizes:served does not serve these sizes: it serves n_heads even, found d_model = 12, n_heads = 3" in text
    assert "\n" not in text.strip() and "$.model" in text
    even = ModelConfig(name="m", vocab_size=5, context_length=4, d_model=8, n_layers=1, n_heads=2, d_ff=8)
    spec, registry = solo_spec(component, CausalAttentionConfig(), even)
    assert blockspec.build(spec, registry=registry) is not None


@pytest.mark.parametrize(("serves", "said"), [
    ("n_heads even", "serves must be a callable (ModelConfig) -> bool, found 'n_heads even'"),
    (lambda: True, "serves must be a callable (ModelConfig) -> bool taking one argument"),
    (lambda a, b: True, "taking one argument"),
])
def test_registration_refuses_a_constraint_that_is_not_a_one_argument_callable(serves, said):
    with pytest.raises(RegistrationError, match=re.escape(said)):
        validate_component(_component(serves))


def _component(serves) -> Component:
    return Component(kind="attention", name="x", config_cls=CausalAttentionConfig, build=build_causal_attention,
                     distribution="d", version="0", serves=serves)


def test_a_constraint_is_described_by_its_docstring_else_its_name(sizes):
    assert sizes.get("attention", "served", DISTRIBUTION).constraint == "n_heads even"

    def heads_above_one(model):
        return model.n_heads > 1

    assert _component(heads_above_one).constraint == "heads_above_one"
    validate_component(_component(heads_above_one))


def test_the_load_time_probe_leaves_a_component_that_does_not_serve_its_sizes_unprobed():
    from blockspec.testing.probe import PROBE_MODEL, probe

    assert not no_drawn_size(PROBE_MODEL)
    said = probe(_component(no_drawn_size))
    assert said == "it does not serve the probe sizes (it serves n_heads above 100)"
