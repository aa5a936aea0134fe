"""Public hypothesis strategies: model sizes, component configs, token batches, whole specs.

Sizes stay small on purpose: a property that holds is checked in milliseconds, and
hypothesis shrinks a failure towards the smallest model that shows it.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Literal

import attrs
from hypothesis import assume
from hypothesis import strategies as st

from blockspec.errors import FieldError
from blockspec.spec.kinds import SECTIONS
from blockspec.registry.components import Component, Registry
from blockspec.spec.strict import CONVERTER
from blockspec.spec.validators import SIZED_BY
from blockspec.spec.schema import ComponentChoice, ComponentSpec, LayerOverride, LayerRule, ModelConfig, ModelSpec
from blockspec.testing.cases import DTYPES, Case, installed_registry
from blockspec.testing.harness import PER_LAYER

HEAD_COUNTS = (1, 2, 4)
HEAD_DIMS = (2, 4, 8)
VOCAB_SIZES = (2, 3, 11, 40)
CONTEXT_LENGTHS = (2, 5, 16)
# A few sizes rather than every integer: each new tensor shape costs PyTorch a
# kernel set-up on first use, and the properties do not depend on exact sizes.
LAYER_INDICES = (0, 1, 2, 3)  # a block or FFN built alone is drawn as one of the first four layers
DROPOUTS = (0.0, 0.1, 0.5)  # [model] dropout: off, typical, heavy (train-mode checks see it; eval must not)
FAR_STARTS = (60, 63, 64, 65, 100, 127, 128, 255, 256, 511, 512, 1000, 1023, 1024, 2048, 4096)
# First positions far past any drawn context (at most 16, so 3·16 = 48 before): a table, clamp or
# cache size at a power of two (or one off it) shows up at the default budget.


@st.composite
def model_configs(draw, *, max_layers: int = 3) -> ModelConfig:
    """A valid [model] table: d_model = n_heads · head_dim with an even head_dim (RoPE needs one); sometimes a
    [model] head_dim of its own (even too) and an embedding_scale; a dropout, 0 or above."""
    n_heads = draw(st.sampled_from(HEAD_COUNTS))
    head_dim = draw(st.sampled_from(HEAD_DIMS))
    kv_choices = [k for k in range(1, n_heads + 1) if n_heads % k == 0]
    return ModelConfig(
        name="hypothesis",
        vocab_size=draw(st.sampled_from(VOCAB_SIZES)),
        context_length=draw(st.sampled_from(CONTEXT_LENGTHS)),
        d_model=n_heads * head_dim,
        n_layers=draw(st.integers(0, max_layers)),
        n_heads=n_heads,
        n_kv_heads=draw(st.sampled_from(kv_choices)),
        d_ff=draw(st.sampled_from([1, 3, 4 * n_heads * head_dim])),
        bias=draw(st.booleans()),
        norm_placement=draw(st.sampled_from(["pre", "post"])),
        head_dim=draw(st.none() | st.sampled_from(HEAD_DIMS)),
        embedding_scale=draw(st.none() | st.sampled_from([0.5, 2.0, "sqrt_d"])),
        dropout=draw(st.sampled_from(DROPOUTS)),
    )


def field_values(field: attrs.Attribute, hint: Any) -> st.SearchStrategy:
    """Values for one config field, from its type; numbers stay near their default."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        inner = next(a for a in args if a is not type(None))
        return st.none() | field_values(field, inner)
    default = None if field.default is attrs.NOTHING else field.default
    if isinstance(default, attrs.Factory):
        default = default.factory()
    if hint is bool:
        return st.booleans()
    if hint is int:
        return st.sampled_from(_near_int(default)) if default is not None else st.integers(1, 8)
    if hint is float:
        return st.sampled_from([default * 0.5, default, default * 2.0]) if default else st.floats(0.5, 2.0)
    if origin is tuple and args == (float, Ellipsis):
        return st.just(default) | float_lists()
    if default is not None:
        return st.just(default)
    raise TypeError(f"no strategy for field {field.name!r} of type {hint!r}; pass one in overrides=")


FLOAT_LIST_LENGTHS = (1, 2, 4)  # one per rotated pair of the drawn head dims (HEAD_DIMS / 2): longrope's factors


def float_lists() -> st.SearchStrategy[tuple[float, ...]]:
    """A tuple[float, ...] option: one to four numbers in [0.5, 8], at the lengths a per-pair list takes for the
    drawn sizes; a build that wants another length refuses the draw (no example)."""
    return st.sampled_from(FLOAT_LIST_LENGTHS).flatmap(lambda n: st.lists(
        st.sampled_from([0.5, 1.0, 2.0, 8.0]) | st.floats(0.5, 8.0), min_size=n, max_size=n).map(tuple))


def _near_int(default: int) -> list[int]:
    """Half, the default and twice it; an option off by default (0: no shared experts) is drawn on too."""
    if default == 0:
        return [0, 1, 2]
    return sorted({max(default // 2, 1), default, default * 2}) if default > 0 else [default]


def configs(config_cls: type, overrides: dict[str, st.SearchStrategy] | None = None, *,
            model: ModelConfig | None = None) -> st.SearchStrategy:
    """Instances of a component's frozen attrs config class, drawn field by field.

    A field the class's validators refuse (a FieldError names it) is repaired and the class tried again: a
    value off its default falls back to the default (an option the drawn setting does not take: rope's yarn
    options under linear), one at its default is drawn again (an option the setting needs: yarn's original
    length). A draw still refused is rejected: every value is valid. With ``model``, each ``sized_by`` option
    is fitted to the entries those sizes need (``fit_to``).
    """
    hints = typing.get_type_hints(config_cls)
    strategies = {f.name: (overrides or {}).get(f.name) or field_values(f, hints.get(f.name, Any))
                  for f in attrs.fields(config_cls) if f.init}
    return _valid_configs(config_cls, strategies, model)


@st.composite
def _valid_configs(draw, config_cls: type, strategies: dict[str, st.SearchStrategy],
                   model: ModelConfig | None) -> Any:
    values: dict[str, Any] | None = {name: draw(strategy) for name, strategy in strategies.items()}
    for _ in range(2 * len(strategies) + 2):
        try:
            config = config_cls(**values)
        except FieldError as error:
            values = _repaired(draw, values, error, strategies, _defaults(config_cls))
        except (ValueError, TypeError):
            values = None
        else:
            return config if model is None else fit_to(config, model)
        if values is None:
            break
    assume(False)  # no valid config near this draw


def _defaults(config_cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in attrs.fields(config_cls)
            if f.init and f.default is not attrs.NOTHING and not isinstance(f.default, attrs.Factory)}


def _repaired(draw, values: dict[str, Any], error: FieldError, strategies: dict[str, st.SearchStrategy],
              defaults: dict[str, Any]) -> dict[str, Any] | None:
    """The refused fields moved: off its default -> the default, at it (or with none) -> drawn again; None
    when that changes nothing."""
    refused = {e.field for e in getattr(error, "errors", [error])} & values.keys()
    changed = dict(values)
    for name in refused:
        off_default = name in defaults and values[name] != defaults[name]
        changed[name] = defaults[name] if off_default else draw(strategies[name])
    return changed if changed != values else None


def fit_to(config: Any, model: ModelConfig) -> Any:
    """``config`` with each non-empty ``sized_by`` tuple option cycled (or cut) to the entries ``model`` needs:
    a per-head or per-pair list drawn before the sizes were known."""
    changes = {}
    for field in attrs.fields(type(config)):
        sized, value = field.metadata.get(SIZED_BY), getattr(config, field.name)
        if sized is not None and value and len(value) != (wanted := sized[0](config, model)):
            changes[field.name] = tuple(value[i % len(value)] for i in range(wanted))
    return attrs.evolve(config, **changes) if changes else config


@st.composite
def cases(draw, component: Component, *, min_tokens: int = 1, max_tokens: int = 6, max_batch: int = 3) -> Case:
    """One example for a property of ``component``: sizes, config, inputs' seed and knobs.

    ``cut`` < tokens - 1 whenever there are two tokens, so "change what comes after cut" changes something.
    ``trained`` is drawn: fresh modules, and modules perturbed as training would leave them.
    """
    model = draw(model_configs())
    layer = draw(layer_draws(component))
    if layer:  # the model holds the layer the block or FFN is built as
        model = attrs.evolve(model, n_layers=max(model.n_layers, layer["layer_index"] + 1))
    tokens = draw(st.integers(min(min_tokens, model.context_length), min(max_tokens, model.context_length)))
    return Case(
        model=model,
        config=draw(configs(component.config_cls, model=model)),
        batch=draw(st.integers(1, max_batch)),
        tokens=tokens,
        seed=draw(st.integers(0, 2**16)),
        dtype=draw(st.sampled_from(DTYPES)),
        factor=draw(st.sampled_from([0.5, 2.0, 3.0, 10.0, 100.0]) | st.floats(0.5, 100.0)),
        start=draw(starts(model.context_length)),
        cut=draw(st.integers(0, max(tokens - 2, 0))),
        trained=draw(st.booleans()),
        **layer,
    )


@st.composite
def layer_draws(draw, component: Component) -> dict[str, Any]:
    """For a block or FFN (``cases`` grows the model to hold the layer): the stand-in layer's index and the
    installed norm and activation its sublayers are built from, the reference partners first (what a failure
    shrinks to). Nothing for the other kinds."""
    if component.kind not in PER_LAYER:
        return {}
    return {"layer_index": draw(st.sampled_from(LAYER_INDICES)),
            "norm": draw(st.sampled_from((None, *installed_partners("norm")))),
            "activation": draw(st.sampled_from((None, *installed_partners("activation"))))}


PARTNER_PROMISES = {"norm": {"standardizes", "unit_rms"}, "activation": {"elementwise", "gated"}}


@functools.cache
def installed_partners(kind: str) -> tuple[Component, ...]:
    """The installed components of ``kind`` a stand-in layer may build (``cases.installed_registry()``): those
    that promise what a norm or activation is for, built from their default config."""
    return tuple(c for c in installed_registry()
                 if c.kind == kind and c.promises & PARTNER_PROMISES[kind] and _default_config(c) is not None)


def _default_config(component: Component) -> object | None:
    try:
        return component.config_cls()
    except (TypeError, ValueError):  # a required field: no default to build the partner from
        return None


def starts(context_length: int) -> st.SearchStrategy[int]:
    """First positions: near the context (up to 3·context_length), or far past it (``FAR_STARTS``)."""
    return st.integers(0, 3 * context_length) | st.sampled_from(FAR_STARTS)


def sequences(component: Component):
    """Cases with at least two tokens: for checks that change the later ones."""
    return cases(component, min_tokens=2)


@st.composite
def token_batches(draw, vocab_size: int, *, max_batch: int = 3, max_tokens: int = 8):
    """A (B, N) LongTensor of token ids below ``vocab_size``."""
    import torch

    batch, tokens = draw(st.integers(1, max_batch)), draw(st.integers(1, max_tokens))
    ids = draw(st.lists(st.integers(0, vocab_size - 1), min_size=batch * tokens, max_size=batch * tokens))
    return torch.tensor(ids, dtype=torch.long).view(batch, tokens)  # (B, N)


def component_specs(registry: Registry, kind: str, *, where=None,
                    model: ModelConfig | None = None) -> st.SearchStrategy:
    """A ComponentSpec for one of the registry's components of ``kind`` (filtered by ``where``), its
    ``sized_by`` options fitted to ``model`` when given."""
    choices = [c for c in registry if c.kind == kind and (where is None or where(c))]
    if not choices:
        raise ValueError(f"the registry has no {kind} component to draw from")
    return st.sampled_from(choices).flatmap(lambda c: configs(c.config_cls, model=model).map(
        lambda config, c=c: ComponentSpec(kind=kind, name=c.name, config=config,
                                          distribution=_pin(registry, c))))


def _pin(registry: Registry, component: Component) -> str | None:
    """Pin the distribution only where two plugins provide the same name."""
    return component.distribution if len(registry.providers(component.kind, component.name)) > 1 else None


@st.composite
def model_specs(draw, registry: Registry, *, where=None, model: st.SearchStrategy | None = None,
                vary_layers: bool = False) -> ModelSpec:
    """A whole valid ModelSpec whose components come from ``registry``.

    ``where(component)`` narrows the choice (e.g. only heads that promise "lm"). ``vary_layers``: sometimes a
    [[layers]] entry too (``layer_rules``), so the layers are not all alike.
    """
    config = draw(model if model is not None else model_configs())
    parts = {kind: draw(component_specs(registry, kind, where=where, model=config)) for kind in SECTIONS}
    if parts["block"].name in ("pre", "post") and parts["block"].name != config.norm_placement:
        config = attrs.evolve(config, norm_placement=parts["block"].name)  # a spec file cannot say both
    chosen = [registry.get(p.kind, p.name, p.distribution) for p in parts.values()]
    assume(all(c is None or c.serves_model(config) for c in chosen))  # only sizes every component serves
    rules = draw(layer_rules(registry, config, where=where)) if vary_layers else ()
    return ModelSpec(model=config, layers=rules, **parts)


VARIED_KINDS = ("norm", "activation", "attention")  # what a drawn [[layers]] entry switches


@st.composite
def layer_rules(draw, registry: Registry, model: ModelConfig, *, where=None) -> tuple[LayerRule, ...]:
    """No [[layers]] entry, or one that gives the odd layers (every = 2, offset = 1) another component of one
    kind, with its own drawn config: per-layer variation as a spec writes it."""
    if model.n_layers < 2 or not draw(st.booleans()):
        return ()
    kind = draw(st.sampled_from(VARIED_KINDS))
    serving = lambda c: (where is None or where(c)) and c.serves_model(model)  # noqa: E731  # only sizes it serves
    part = draw(component_specs(registry, kind, where=serving, model=model))
    use = ComponentChoice(kind=kind, name=part.name, distribution=part.distribution, config_cls=type(part.config))
    fields = {name: value for name, value in CONVERTER.unstructure(part.config).items() if value is not None}
    override = LayerOverride(fields=fields, use=use)  # as a TOML table writes it: no None
    return (LayerRule(every=2, offset=1, overrides={kind: override}),)
