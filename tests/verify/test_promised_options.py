"""Issue 21, bug 7: the kit switches a property on by what a component promises, never by a config field's
name or a component's name. A field that happens to be called ``offset`` (or ``tied``, ``fraction``,
``sliding_window``, ...) means nothing to the kit unless the component promises what the kit checks."""

from __future__ import annotations

import attrs
import pytest
from attrs import frozen

from blockspec.errors import RegistrationError
from blockspec.registry.components import Component, validate_component
from blockspec.spec.kinds import PROMISE_MEANINGS, PROMISED_FIELDS, PROMISES, REQUIRES
from blockspec.testing import PROPERTIES, check, verify
from blockspec.testing.properties import find
from tests.verify.corpus.norm import OnesOffset, ShiftedLayerNormConfig, build_shifted_layernorm


def third_party(kind: str, name: str, config_cls: type, build, promises: tuple[str, ...]) -> Component:
    component = Component(kind=kind, name=name, config_cls=config_cls, build=build, distribution="acme-norms",
                          version="1.0", promises=frozenset(promises))
    validate_component(component)
    return component


SHIFTED = ("scale_invariant", "shift_invariant", "standardizes")


def test_a_correct_norm_with_a_field_named_offset_passes_the_kit() -> None:
    norm = third_party("norm", "shifted_layernorm", ShiftedLayerNormConfig, build_shifted_layernorm, SHIFTED)
    results = verify([norm], max_examples=6)
    failed = [r.message for r in results if r.status == "failed"]
    assert not failed, failed
    offset = next(r for r in results if r.property == "offset_init")
    assert offset.status == "not applicable"
    assert "does not promise 'offset_init'" in offset.message


@frozen(kw_only=True)
class OffsetNormConfig:
    """A third party's Gemma norm: its own config class, the offset always on."""

    eps: float = 1e-5
    offset: bool = True


def test_a_norm_that_promises_the_offset_and_breaks_it_fails_offset_init() -> None:
    broken = third_party("norm", "gemma_ones", OffsetNormConfig,
                         lambda config, ctx: OnesOffset(ctx.model.d_model, eps=config.eps),
                         ("scale_invariant", "offset_init"))
    result = check(broken, find("offset_init", "norm"), max_examples=6)
    assert result.status == "failed"
    assert "the offset norm's weight at init" in result.message


def _options() -> list[tuple[str, str, str]]:
    return [(kind, promise, field) for (kind, promise), fields in PROMISED_FIELDS.items() for field in fields]


def _fields_of(kind: str, promise: str | None) -> tuple[str, ...]:
    """The config fields a required promise reads (qk_norm_offset needs qk_norm, which reads `qk_norm`)."""
    return PROMISED_FIELDS.get((kind, promise), ()) if promise else ()


def _required(kind: str, promise: str) -> tuple[str, ...]:
    """The promises ``promise`` builds on, transitively (sink_option needs sinks, which needs causal)."""
    needed = REQUIRES.get((kind, promise))
    return (needed, *_required(kind, needed)) if needed else ()


@pytest.mark.parametrize(("kind", "promise", "field"), _options())
def test_a_field_named_like_an_option_switches_nothing_on(kind: str, promise: str, field: str) -> None:
    """The field alone, without the promise: no property of the kind applies because of it."""
    needed = _required(kind, promise)
    fields = [name for p in needed for name in _fields_of(kind, p)]
    config_cls = attrs.make_class(f"Has_{field}", {name: attrs.field(default=None)
                                                   for name in dict.fromkeys((field, *fields))}, frozen=True)
    bare = third_party(kind, "bare", config_cls, lambda config, ctx: None, needed)
    promised = attrs.evolve(bare, promises=bare.promises | {promise})
    switched = {p.name for p in PROPERTIES if p.concerns(bare) and p.applies(promised) and not p.applies(bare)}
    assert switched, f"no property checks the promise {promise!r}"
    with_field = {p.name for p in PROPERTIES if p.applies(bare)}
    assert not switched & with_field


def test_no_property_applies_by_a_component_name() -> None:
    """The parallel block's formula is checked because the block promises 'parallel', not because of its name."""
    @frozen
    class Nothing:
        pass

    named = third_party("block", "parallel", Nothing, lambda config, ctx: None, ("residual", "causal"))
    assert not find("parallel", "block").applies(named)
    assert find("parallel", "block").applies(attrs.evolve(named, name="two_paths",
                                                          promises=named.promises | {"parallel"}))


@pytest.mark.parametrize(("kind", "promise"), sorted(PROMISED_FIELDS))
def test_promising_an_option_without_its_field_is_refused_at_registration(kind: str, promise: str) -> None:
    needed = REQUIRES.get((kind, promise))
    Nothing = attrs.make_class("Nothing", {name: attrs.field(default=None) for name in _fields_of(kind, needed)},
                               frozen=True)  # the fields of the promise it needs, if any: only its own lacking
    promises = frozenset({promise, needed} - {None})
    component = Component(kind=kind, name="lacking", config_cls=Nothing, build=lambda config, ctx: None,
                          distribution="acme", version="1.0", promises=promises)
    field = PROMISED_FIELDS[(kind, promise)][0]
    with pytest.raises(RegistrationError, match=rf"promise '{promise}' reads the config field '{field}', "
                                                rf"which Nothing lacks"):
        validate_component(component)


def test_every_option_promise_is_a_promise_with_a_meaning_that_names_its_fields() -> None:
    for (kind, promise), fields in PROMISED_FIELDS.items():
        assert promise in PROMISES[kind]
        for field in fields:
            assert f"`{field}`" in PROMISE_MEANINGS[(kind, promise)], (kind, promise, field)


def test_the_first_party_components_declare_what_the_kit_checks(registry) -> None:
    declared = {(c.kind, c.name): c.promises for c in registry}
    assert "offset_init" in declared[("norm", "rmsnorm")]
    assert {"partial_rotary", "rope_frequencies"} <= declared[("positional", "rope")]
    assert {"sliding_window", "logit_softcap", "qk_norm", "softmax_heads"} <= declared[("attention", "causal")]
    assert {"tie_option", "logit_softcap"} <= declared[("head", "lm")]
    assert "parallel" in declared[("block", "parallel")]
    assert {"position_wise", "mixture", "aux_loss", "compiles"} <= declared[("ffn", "moe")]
