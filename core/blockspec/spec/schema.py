"""The spec schema: frozen attrs classes, one per TOML table.

Data flows one way: TOML text -> dict -> ModelSpec (convert.py) -> model (assemble.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Annotated, Any, Literal

from attrs import field, frozen

from blockspec.errors import ArgumentTypeError, FieldError, Problem
from blockspec.spec.problems import flatten
from blockspec.spec.strict import CONVERTER
from blockspec.spec.validators import Check, FieldErrors

NormPlacement = Literal["pre", "post"]
MAX_LAYERS = 1024  # far above any published model; bounds the cost of checking a hostile spec
# The other sizes, bounded as the layers are: far above any published model (vocabularies of 256k, contexts
# of 10M, d_ff of 53k, 128 heads), so a typo or a hostile file is refused before anything is sized by it.
MAX_VOCAB_SIZE = 2**24  # also what `blockspec tokenizer train` may learn (data/tokenizer.py)
MAX_CONTEXT_LENGTH = 2**24
MAX_WIDTH = 2**20  # d_model, d_ff, head_dim
MAX_HEADS = 2**16  # n_heads, n_kv_heads
INIT_STD = 0.02  # GPT-2's initialisation

def at_most(most: int) -> Check:
    """A size's upper bound (None passes: an optional size left out); POSITIVE says the lower one."""
    return Check(lambda v: v is None or v <= most, f"at most {most:_}", typed=False, json_schema={"maximum": most})


# Value checks live in the types, so the converter checks every field in one pass and reports
# them all; the same Check is the attrs validator for configs built in Python.
POSITIVE = Check(lambda v: v is None or v >= 1, "a positive integer", typed=False, json_schema={"minimum": 1})
VOCAB = at_most(MAX_VOCAB_SIZE)
CONTEXT = at_most(MAX_CONTEXT_LENGTH)
WIDTH = at_most(MAX_WIDTH)
HEADS = at_most(MAX_HEADS)
LAYERS = Check(lambda v: 0 <= v <= MAX_LAYERS, f"a number in [0, {MAX_LAYERS}]", typed=False,
               json_schema={"minimum": 0, "maximum": MAX_LAYERS})
PROBABILITY = Check(lambda v: 0.0 <= v < 1.0, "a number in [0.0, 1.0)", typed=False,
                    json_schema={"minimum": 0.0, "exclusiveMaximum": 1.0})
STD = Check(lambda v: v is None or v > 0.0, "a number > 0.0", typed=False, json_schema={"exclusiveMinimum": 0.0})
EMBEDDING_SCALE = Check(lambda v: v is None or v == "sqrt_d" or (not isinstance(v, str) and v > 0.0),
                        'a number > 0.0 or "sqrt_d"', typed=False,
                        json_schema={"anyOf": [{"type": "number", "exclusiveMinimum": 0.0}, {"const": "sqrt_d"},
                                               {"type": "null"}]})
EmbeddingScale = Annotated[float | str | None, EMBEDDING_SCALE]  # strict.py reads float | str | None exactly


@frozen(kw_only=True)
class ModelConfig:
    """The [model] table: sizes and wiring shared by every component.

    name: what messages, show and checkpoints call the model.
    vocab_size: the number of token ids.
    context_length: the most positions one forward pass takes.
    d_model: the width of the residual stream.
    n_layers: the number of blocks.
    n_heads: query heads per attention layer.
    n_kv_heads: key and value heads (default n_heads; fewer gives GQA, 1 gives MQA).
    d_ff: the FFN's hidden width (for a gated activation, the width of each branch).
    bias: whether the linear layers have biases.
    norm_placement: "pre" or "post", another way to write [block] use.
    final_norm: a norm after the last block (default: true for pre, false for post).
    dropout: the dropout probability.
    head_dim: each head's width (default d_model / n_heads; given, n_heads need not divide d_model).
    embedding_scale: what the token embeddings are multiplied by: a number, or "sqrt_d" (Gemma); none: 1.
    """

    name: str = "model"
    vocab_size: Annotated[int, POSITIVE, VOCAB] = field(validator=[POSITIVE, VOCAB])
    context_length: Annotated[int, POSITIVE, CONTEXT] = field(validator=[POSITIVE, CONTEXT])
    d_model: Annotated[int, POSITIVE, WIDTH] = field(validator=[POSITIVE, WIDTH])
    n_layers: Annotated[int, LAYERS] = field(validator=LAYERS)
    n_heads: Annotated[int, POSITIVE, HEADS] = field(validator=[POSITIVE, HEADS])
    n_kv_heads: Annotated[int | None, POSITIVE, HEADS] = field(default=None, validator=[POSITIVE, HEADS])
    d_ff: Annotated[int, POSITIVE, WIDTH] = field(validator=[POSITIVE, WIDTH])
    bias: bool = True
    norm_placement: NormPlacement = "pre"
    final_norm: bool | None = None
    dropout: Annotated[float, PROBABILITY] = field(default=0.0, validator=PROBABILITY)
    # Written "head_dim" in a spec (the attribute is private: ``head_dim`` below is always the width in use).
    given_head_dim: Annotated[int | None, POSITIVE, WIDTH] = field(default=None, validator=[POSITIVE, WIDTH],
                                                                  alias="head_dim")
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

    std: the standard deviation of declared weights.
    embedding_std: the token embedding's (and a tied head's) standard deviation; default std.
    residual_scaling: residual projections use std/sqrt(2·n_layers).
    """

    std: Annotated[float, STD] = field(default=INIT_STD, validator=STD)
    embedding_std: Annotated[float | None, STD] = field(default=None, validator=STD)
    residual_scaling: bool = True

    @property
    def token_embedding_std(self) -> float:
        return self.std if self.embedding_std is None else self.embedding_std


@frozen(kw_only=True)
class _Named:
    """Which component a ``use`` names: its kind, name, and distribution when pinned."""

    kind: str
    name: str
    distribution: str | None = None  # set when the spec pins "distribution:name"

    @property
    def use(self) -> str:
        return f"{self.distribution}:{self.name}" if self.distribution else self.name


@frozen(kw_only=True)
class ComponentSpec(_Named):
    """One component table: which provider (``use``) and its validated config."""

    config: Any


@frozen(kw_only=True)
class AdapterSpec(ComponentSpec):
    """One [[adapters]] entry: the adapter component (``use`` and its options) and what it wraps.

    ``targets`` are module-path patterns over the assembled model (``*`` and ``?`` within one
    dotted segment: ``blocks.*.attn.qkv``), or ``@kind`` for every linear layer of the components
    of that kind (``@attention``, ``@ffn``); assembly/adapters.py matches them.
    """

    targets: tuple[str, ...]


LAYER_KINDS = ("block", "attention", "ffn", "norm", "activation", "positional")  # the kinds [[layers]] may vary
# [model] norm_placement is an alias: each placement names the core's block of that name.
PLACEMENT_BLOCKS: Mapping[str, str] = MappingProxyType({"pre": "blockspec:pre", "post": "blockspec:post"})


def placement_of(block: ComponentSpec) -> NormPlacement | None:
    """The [model] norm_placement that names ``block``; None for any other block (parallel, a plugin's)."""
    for placement, use in PLACEMENT_BLOCKS.items():
        distribution, _, name = use.partition(":")
        if block.name == name and block.distribution in (None, distribution):
            return placement  # type: ignore[return-value]
    return None


@frozen(kw_only=True)
class ComponentChoice(_Named):
    """A ``use`` resolved to a component: what a [[layers]] entry switches to, and the class of its config."""

    config_cls: type

    def of(self, config: Any) -> ComponentSpec:
        return ComponentSpec(kind=self.kind, name=self.name, distribution=self.distribution, config=config)


@frozen(kw_only=True)
class LayerOverride:
    """One kind's table in a [[layers]] entry: the fields as written, and the component when it gives ``use``."""

    fields: dict[str, Any]
    use: ComponentChoice | None = None  # None: the fields merge over the table the layer has so far


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
    which then all must hold. ``overrides`` maps a kind in LAYER_KINDS to its table.
    """

    index: tuple[int, ...] | None = None
    every: int | None = None
    offset: int | None = None
    start: int | None = None
    stop: int | None = None
    overrides: dict[str, LayerOverride]

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
class MergedTable:
    """A layer's table of one kind before it is checked: the component, its fields, and who wrote each field.

    ``origin`` maps a field to the index of the [[layers]] entry that wrote it (None: the model-wide
    table); ``last`` is the last entry that touched the table.
    """

    choice: ComponentChoice
    fields: dict[str, Any]
    origin: dict[str, int | None]
    last: int


def merged_table(base: ComponentSpec, rules: Sequence[LayerRule | None], kind: str, layer: int) -> MergedTable | None:
    """Layer ``layer``'s table of ``kind``: each entry selecting it merged over ``base`` in order; None if none does.

    An entry that gives ``use`` starts afresh from its own fields. The one rule for what a layer
    is built from: the reader checks its result, and ModelSpec derives its layers from it.
    """
    touching = [k for k, rule in enumerate(rules) if rule is not None and kind in rule.overrides and rule.selects(layer)]
    if not touching:
        return None
    choice = ComponentChoice(kind=kind, name=base.name, distribution=base.distribution, config_cls=type(base.config))
    fields = CONVERTER.unstructure(base.config)
    origin: dict[str, int | None] = dict.fromkeys(fields)
    for k in touching:
        override = rules[k].overrides[kind]  # type: ignore[union-attr]
        if override.use is not None:  # another component (or a fresh one): none of the fields before apply
            choice, fields, origin = override.use, {}, {}
        fields = {**fields, **override.fields}
        origin.update(dict.fromkeys(override.fields, k))
    return MergedTable(choice=choice, fields=fields, origin=origin, last=touching[-1])


@frozen(kw_only=True)
class ModelSpec:
    """A whole validated spec. ``source`` is where it came from, for messages only.

    Each layer's components are derived from the model-wide tables and ``layers`` whenever a
    spec is made (``attrs.evolve`` included), never stored beside them: what equal specs
    build is the same.
    """

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
    adapters: tuple[AdapterSpec, ...] = ()  # the [[adapters]] entries, applied in order after the model is built
    source: str | None = field(default=None, eq=False)
    _layer_specs: tuple[LayerSpec, ...] = field(init=False, eq=False, repr=False)  # derived: layer i's

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_layer_specs", _derived_layers(self))

    def components(self) -> tuple[ComponentSpec, ...]:
        """The model-wide tables."""
        return (self.positional, self.norm, self.activation, self.head, self.attention, self.block, self.ffn)

    def layer(self, index: int) -> LayerSpec:
        """The components layer ``index`` is built from."""
        if not 0 <= index < self.model.n_layers:
            raise IndexError(f"layer {index} of a model with {self.model.n_layers} layers")
        if self._layer_specs:
            return self._layer_specs[index]
        return LayerSpec(block=self.block, attention=self.attention, ffn=self.ffn, norm=self.norm,
                         activation=self.activation, positional=self.positional)

    def distinct_components(self) -> tuple[ComponentSpec, ...]:
        """The model-wide tables, then each per-layer component that differs from them, once."""
        found = list(self.components())
        for layer in self._layer_specs:
            found += [part for part in layer.components() if part not in found]
        return tuple(found)


def _derived_layers(spec: ModelSpec) -> tuple[LayerSpec, ...]:
    """Each layer's components from the rules; () when there are none (every layer is the model-wide tables)."""
    if not spec.layers:
        return ()
    made: dict[tuple[ComponentChoice, str], ComponentSpec] = {}  # one spec per distinct table
    return tuple(LayerSpec(**{kind: _layer_component(spec, kind, i, made) for kind in LAYER_KINDS})
                 for i in range(spec.model.n_layers))


def _layer_component(spec: ModelSpec, kind: str, layer: int,
                     made: dict[tuple[ComponentChoice, str], ComponentSpec]) -> ComponentSpec:
    base = getattr(spec, kind)
    merged = merged_table(base, spec.layers, kind, layer)
    if merged is None:
        return base
    key = (merged.choice, repr(merged.fields))
    if key not in made:
        try:
            made[key] = merged.choice.of(CONVERTER.structure(merged.fields, merged.choice.config_cls))
        except Exception as error:  # a config class's validator may raise anything: say which table it was
            found = "; ".join(f"{problem.path}: {problem.message}" for problem in
                              flatten(error, f"$.layers[{merged.last}].{kind}", merged.choice.config_cls))
            raise ValueError(f"[[layers]] entry {merged.last} gives layer {layer} a {kind} table "
                             f"{merged.choice.use!r} cannot hold: {found}") from error
    return made[key]


def estimate_parameters(model: ModelConfig) -> int:
    """The chapter's closed form: 12·L·d² (blocks) + |V|·d (embedding), from a spec's ``[model]`` table."""
    if not isinstance(model, ModelConfig):  # a ModelSpec or a path: the table is what the formula reads
        raise ArgumentTypeError(Problem(path="model", expected="a ModelConfig (a spec's .model)",
                                        found=type(model).__name__,
                                        hint="estimate_parameters(spec.model), or count_parameters(path) for the "
                                             "exact count and the estimate"))
    return 12 * model.n_layers * model.d_model**2 + model.vocab_size * model.d_model
