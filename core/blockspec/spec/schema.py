"""The spec schema: frozen attrs classes, one per TOML table.

Data flows one way: TOML text -> dict -> ModelSpec (convert.py) -> model (assemble.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from attrs import field, frozen

from blockspec.errors import FieldError
from blockspec.spec.validators import Check, FieldErrors

NormPlacement = Literal["pre", "post"]
MAX_LAYERS = 1024  # far above any published model; bounds the cost of checking a hostile spec
INIT_STD = 0.02  # GPT-2's initialisation

# Value checks live in the types, so the converter checks every field in one pass and reports
# them all; the same Check is the attrs validator for configs built in Python.
POSITIVE = Check(lambda v: v is None or v >= 1, "a positive integer", typed=False)
LAYERS = Check(lambda v: 0 <= v <= MAX_LAYERS, f"a number in [0, {MAX_LAYERS}]", typed=False)
PROBABILITY = Check(lambda v: 0.0 <= v < 1.0, "a number in [0.0, 1.0)", typed=False)
STD = Check(lambda v: v is None or v > 0.0, "a number > 0.0", typed=False)
EMBEDDING_SCALE = Check(lambda v: v is None or v == "sqrt_d" or (not isinstance(v, str) and v > 0.0),
                        'a number > 0.0 or "sqrt_d"', typed=False)
Size = Annotated[int, POSITIVE]
EmbeddingScale = Annotated[float | str | None, EMBEDDING_SCALE]  # strict.py reads float | str | None exactly


@frozen(kw_only=True)
class ModelConfig:
    """The [model] table: sizes and wiring shared by every component."""

    name: str = "model"
    vocab_size: Size = field(validator=POSITIVE)
    context_length: Size = field(validator=POSITIVE)
    d_model: Size = field(validator=POSITIVE)
    n_layers: Annotated[int, LAYERS] = field(validator=LAYERS)
    n_heads: Size = field(validator=POSITIVE)
    n_kv_heads: Annotated[int | None, POSITIVE] = field(default=None, validator=POSITIVE)
    d_ff: Size = field(validator=POSITIVE)
    bias: bool = True
    norm_placement: NormPlacement = "pre"
    final_norm: bool | None = None
    dropout: Annotated[float, PROBABILITY] = field(default=0.0, validator=PROBABILITY)
    # Written "head_dim" in a spec (the attribute is private: ``head_dim`` below is always the width in use).
    given_head_dim: Annotated[int | None, POSITIVE] = field(default=None, validator=POSITIVE, alias="head_dim")
    embedding_scale: EmbeddingScale = field(default=None, validator=EMBEDDING_SCALE)

    def __attrs_post_init__(self) -> None:
        errors = cross_field_errors({"d_model": self.d_model, "n_heads": self.n_heads, "n_kv_heads": self.n_kv_heads,
                                     "head_dim": self.given_head_dim})
        if errors:
            raise errors[0] if len(errors) == 1 else FieldErrors(errors)

    @property
    def head_dim(self) -> int:
        """Each head's width: [model] head_dim when given (Gemma, Qwen3), else d_model / n_heads."""
        return self.d_model // self.n_heads if self.given_head_dim is None else self.given_head_dim

    @property
    def embedding_multiplier(self) -> float | None:
        """What the token embeddings are multiplied by (Gemma: sqrt(d_model)); None: not scaled."""
        if self.embedding_scale == "sqrt_d":
            return self.d_model**0.5
        return self.embedding_scale

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def has_final_norm(self) -> bool:
        """Pre-LN stacks end with a norm (GPT-2); Post-LN ones already end normalised."""
        return self.norm_placement == "pre" if self.final_norm is None else self.final_norm


def cross_field_errors(values: Mapping[str, Any]) -> list[FieldError]:
    """The checks that relate fields, on whichever of them are present (the reader passes the valid ones)."""
    errors = []
    d_model, n_heads, n_kv_heads = (values.get(k) for k in ("d_model", "n_heads", "n_kv_heads"))
    if values.get("head_dim") is None and d_model is not None and n_heads is not None and d_model % n_heads:
        errors.append(FieldError("n_heads", f"expected a divisor of d_model={d_model}, found {n_heads}"))
    if n_heads is not None and n_kv_heads is not None and n_heads % n_kv_heads:
        errors.append(FieldError("n_kv_heads", f"expected a divisor of n_heads={n_heads}, found {n_kv_heads}"))
    return errors


@frozen(kw_only=True)
class InitConfig:
    """The optional [init] table: how build() draws the weights. Without it, GPT-2's initialisation.

    It draws only what components declare (``init_roles``, ``blockspec.plugin``); the rest keep
    their own. Declared weights ~ N(0, std²), biases zero; declared residual projections
    (attention's proj, an FFN's down) use std/sqrt(2·n_layers) when residual_scaling; the token
    embedding (and a head tied to it) ~ N(0, embedding_std²), embedding_std defaulting to std.
    """

    std: Annotated[float, STD] = field(default=INIT_STD, validator=STD)
    embedding_std: Annotated[float | None, STD] = field(default=None, validator=STD)
    residual_scaling: bool = True

    @property
    def token_embedding_std(self) -> float:
        return self.std if self.embedding_std is None else self.embedding_std


@frozen(kw_only=True)
class ComponentSpec:
    """One component table: which provider (``use``) and its validated config."""

    kind: str
    name: str
    distribution: str | None = None  # set when the spec pins "distribution:name"
    config: Any

    @property
    def use(self) -> str:
        return f"{self.distribution}:{self.name}" if self.distribution else self.name


LAYER_KINDS = ("block", "attention", "ffn", "norm", "activation", "positional")  # the kinds [[layers]] may vary


@frozen(kw_only=True)
class LayerSpec:
    """The components one layer is built from: the model-wide tables with the [[layers]] overrides applied."""

    block: ComponentSpec
    attention: ComponentSpec
    ffn: ComponentSpec
    norm: ComponentSpec  # the layer's norms; the final norm is always the model-wide [norm]
    activation: ComponentSpec
    positional: ComponentSpec  # what the layer's attention rotates or biases by (additive ones are model-wide)

    def components(self) -> tuple[ComponentSpec, ...]:
        return tuple(getattr(self, kind) for kind in LAYER_KINDS)


@frozen(kw_only=True)
class LayerRule:
    """One [[layers]] entry as written: which layers (a selector) and the tables it overrides there.

    The selector is ``index`` (a list of layers), or any of ``every``/``offset`` (layers
    offset, offset+every, ...) and ``start``/``stop`` (TOML ``from``/``to``, both inclusive),
    which then all must hold. ``overrides`` maps a kind in LAYER_KINDS to its fields as written,
    ``use`` among them when the entry changes the component.
    """

    index: tuple[int, ...] | None = None
    every: int | None = None
    offset: int | None = None
    start: int | None = None
    stop: int | None = None
    overrides: dict[str, dict[str, Any]]

    def selects(self, layer: int) -> bool:
        if self.index is not None:
            return layer in self.index
        if self.start is not None and layer < self.start or self.stop is not None and layer > self.stop:
            return False
        offset = self.offset or 0
        return self.every is None or layer >= offset and (layer - offset) % self.every == 0

    def layers(self, n_layers: int) -> list[int]:
        return [i for i in range(n_layers) if self.selects(i)]


@frozen(kw_only=True)
class ModelSpec:
    """A whole validated spec. ``source`` is where it came from, for messages only."""

    model: ModelConfig
    positional: ComponentSpec
    norm: ComponentSpec
    activation: ComponentSpec
    head: ComponentSpec
    attention: ComponentSpec
    block: ComponentSpec
    ffn: ComponentSpec
    init: InitConfig = InitConfig()
    layers: tuple[LayerRule, ...] = ()  # the [[layers]] entries as written; () when every layer is alike
    resolved_layers: tuple[LayerSpec, ...] = field(default=(), eq=False, repr=False)  # layer i's, from the rules
    source: str | None = field(default=None, eq=False)

    def __attrs_post_init__(self) -> None:
        if self.layers and len(self.resolved_layers) != self.model.n_layers:
            raise ValueError("a spec with [[layers]] needs each layer resolved: read it with load_spec or structure_spec")

    def components(self) -> tuple[ComponentSpec, ...]:
        """The model-wide tables."""
        return (self.positional, self.norm, self.activation, self.head, self.attention, self.block, self.ffn)

    def layer(self, index: int) -> LayerSpec:
        """The components layer ``index`` is built from."""
        if not 0 <= index < self.model.n_layers:
            raise IndexError(f"layer {index} of a model with {self.model.n_layers} layers")
        if self.resolved_layers:
            return self.resolved_layers[index]
        return LayerSpec(block=self.block, attention=self.attention, ffn=self.ffn, norm=self.norm,
                         activation=self.activation, positional=self.positional)

    def distinct_components(self) -> tuple[ComponentSpec, ...]:
        """The model-wide tables, then each per-layer component that differs from them, once."""
        found = list(self.components())
        for layer in self.resolved_layers:
            found += [part for part in layer.components() if part not in found]
        return tuple(found)


def estimate_parameters(model: ModelConfig) -> int:
    """The chapter's closed form: 12·L·d² (blocks) + |V|·d (embedding)."""
    return 12 * model.n_layers * model.d_model**2 + model.vocab_size * model.d_model
