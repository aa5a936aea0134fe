"""The public strategies draw only valid values."""

from __future__ import annotations

import pytest
from attrs import field, frozen
from hypothesis import given, settings
from hypothesis import strategies as st

from blockspec.testing.strategies import configs, model_configs, token_batches
from blockspec.spec.validators import greater_than
from blockspec_positional import RopeConfig


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
