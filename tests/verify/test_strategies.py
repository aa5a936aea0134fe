"""The public strategies draw only valid values."""

from __future__ import annotations

import attrs
import pytest
from attrs import field, frozen
from hypothesis import given, settings
from hypothesis import strategies as st

from blockspec import ModelConfig
from blockspec.plugin import sized_by
from blockspec.testing import Case
from blockspec.testing.cases import installed_registry
from blockspec.testing.harness import build_isolated
from blockspec.testing.properties.rope import call_ends, scaling_variants
from blockspec.testing.strategies import cases, configs, fit_to, model_configs, token_batches
from blockspec.spec.validators import greater_than
from blockspec_positional import RopeConfig, rotary_pairs


@frozen(kw_only=True)
class Picky:
    """A config whose validator refuses half of what the type allows."""

    scale: float = field(default=1.0, validator=greater_than(0.75))
    width: int | None = None
    mode: str = "fixed"


@given(configs(RopeConfig))
def test_literal_fields_draw_only_their_choices(config):
    assert config.layout in ("half", "interleaved") and config.base > 1.0


@given(configs(Picky))
def test_validators_reject_what_they_refuse(config):
    assert config.scale > 0.75 and config.mode == "fixed"
    assert config.width is None or config.width >= 1


def test_a_field_without_a_type_strategy_or_default_is_a_clear_error():
    @frozen(kw_only=True)
    class Opaque:
        thing: object

    with pytest.raises(TypeError, match="no strategy for field 'thing'"):
        configs(Opaque)


@settings(max_examples=30)
@given(model_configs())
def test_model_sizes_are_consistent(model):
    assert model.head_dim % 2 == 0 and (model.given_head_dim is not None
                                        or model.d_model == model.n_heads * model.head_dim)
    assert model.n_heads % model.kv_heads == 0


@given(st.integers(2, 50).flatmap(lambda v: st.tuples(st.just(v), token_batches(v))))
def test_token_batches_stay_below_the_vocabulary(drawn):
    vocab, ids = drawn
    assert ids.dim() == 2 and 0 <= int(ids.min()) and int(ids.max()) < vocab


@frozen(kw_only=True)
class PerHead:
    """A config with one gain per head: its length follows the model."""

    gains: tuple[float, ...] = field(default=(), metadata=sized_by(lambda config, model: model.n_heads))


def test_fit_to_cycles_or_cuts_each_sized_option_to_the_model():
    model = ModelConfig(d_model=8, n_heads=4, n_layers=1, vocab_size=11, context_length=8, d_ff=16)
    assert fit_to(PerHead(gains=(1.0, 2.0)), model).gains == (1.0, 2.0, 1.0, 2.0)
    assert fit_to(PerHead(gains=(1.0, 2.0, 3.0, 4.0, 5.0)), model).gains == (1.0, 2.0, 3.0, 4.0)
    assert fit_to(PerHead(), model) == PerHead()  # unset stays unset: the validators decide whether it may be


@settings(max_examples=60, database=None)
@given(st.data())
def test_drawn_longrope_factor_lists_fit_the_drawn_sizes(data):
    """cases() fits the per-pair lists to the drawn model, so a longrope draw builds rather than being refused."""
    component = installed_registry().get("positional", "rope")
    case = data.draw(cases(component))
    if case.config.scaling == "longrope":
        pairs = rotary_pairs(case.config, case.model)
        assert len(case.config.short_factor) == len(case.config.long_factor) == pairs
        build_isolated(component, case)


def test_the_kit_checks_a_scaling_on_both_sides_of_its_switch():
    model = ModelConfig(d_model=8, n_heads=2, n_layers=1, vocab_size=11, context_length=16, d_ff=16)
    longrope = RopeConfig(scaling="longrope", original_context_length=6, short_factor=(1.0, 2.0),
                          long_factor=(3.0, 4.0), attention_factor=1.2)
    case = Case(model=model, config=longrope, batch=1, tokens=3, seed=0, dtype="float64", factor=1.0, start=40,
                cut=0, trained=False)
    assert call_ends(case) == [6, 7, 44]
    variants = scaling_variants(case)
    assert [(v.model.context_length, v.config.attention_factor) for v in variants] == [
        (16, 1.2), (16, None), (24, 1.2), (24, None)]
    dynamic = attrs.evolve(case, config=RopeConfig(scaling="dynamic", factor=2.0))
    assert call_ends(dynamic) == [16, 17, 44] and len(scaling_variants(dynamic)) == 1
