"""dict -> ModelSpec through the strict converter, and back to a dict and TOML.

Which components exist is the registry's business: the reader asks a ``Resolver`` for each
``use``, so this layer knows no plugin and imports no torch.
"""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any, Protocol

import tomli_w
import attrs
from attrs import frozen

from blockspec.errors import Problem, SpecError, UnknownComponentError
from blockspec.spec import toml_read as toml_guard
from blockspec.spec.kinds import SECTIONS
from blockspec.spec.problems import did_you_mean, flatten, join, locate
from blockspec.spec.schema import ComponentSpec, InitConfig, ModelConfig, ModelSpec, cross_field_errors
from blockspec.spec.strict import CONVERTER, SHORT, describe

DEFAULT_ATTENTION = "blockspec:causal"  # pinned: a plugin that also registers "causal" cannot make it ambiguous
DEFAULT_FFN = "blockspec:dense"
BLOCKS_DISTRIBUTION = "blockspec-blocks"  # [block] defaults to its "pre" or "post", as [model] norm_placement says
PLACEMENT_BLOCKS = ("pre", "post")  # the blocks that norm_placement names
OPTIONAL_TABLES = ("init",)
TOP_LEVEL = ("model", *SECTIONS, *OPTIONAL_TABLES)


class Resolved(Protocol):
    """What a resolver returns for a ``use`` it can satisfy: the registry's Component fits."""

    name: str
    distribution: str
    config_cls: type


@frozen(kw_only=True)
class Unresolved:
    """Why a ``use`` names no single component; ``unknown`` when nothing of that name is installed."""

    message: str
    hint: str | None = None
    unknown: bool = False


class Resolver(Protocol):
    """The installed components as the spec reader sees them; the registry implements it."""

    def names(self, kind: str) -> list[str]: ...

    def resolve(self, kind: str, use: str) -> Resolved | Unresolved: ...



# ---------------------------------------------------------------- loading


def read_spec_text(path: str | Path) -> str:
    """A spec file as UTF-8 text; reads at most one byte past the size limit."""
    path = Path(path)
    try:
        with path.open("rb") as stream:
            data = stream.read(toml_guard.MAX_SPEC_BYTES + 1)
    except OSError as error:
        raise SpecError(Problem(file=str(path), message=f"cannot read spec: {error.strerror or error}")) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line, column = toml_guard.line_and_column(data.decode("utf-8", "replace"), _char_offset(data, error.start))
        raise SpecError(Problem(file=str(path), line=line, column=column,
                                message=f"not UTF-8 text: byte 0x{data[error.start]:02x} is {error.reason}")) from None


def _char_offset(data: bytes, byte_offset: int) -> int:
    return len(data[:byte_offset].decode("utf-8", "replace"))


def read_spec(
    data: dict[str, Any],
    resolver: Resolver,
    *,
    file: str | None = None,
    text: str | None = None,
) -> ModelSpec:
    """A plain dict (as tomllib gives it) -> a validated ModelSpec, or SpecError listing every problem."""
    if not isinstance(data, dict):
        raise SpecError(Problem(file=file, path="$", message=f"expected a table of tables, found {describe(data)}"))
    return _SpecReader(resolver, file, text).read(data)


class _SpecReader:
    """Collects problems across all tables before failing, so a user sees them all at once."""

    def __init__(self, resolver: Resolver, file: str | None, text: str | None) -> None:
        self.resolver = resolver
        self.file = file
        self.text = text
        self.problems: list[Problem] = []
        self.unknown_component = False

    def read(self, data: dict[str, Any]) -> ModelSpec:
        self._check_tables(data)
        model = self._model(data.get("model"))
        placement = _given_placement(data.get("model"))
        defaults = {"attention": DEFAULT_ATTENTION, "ffn": DEFAULT_FFN,
                    "block": f"{BLOCKS_DISTRIBUTION}:{placement or (model.norm_placement if model else 'pre')}"}
        parts = {kind: self._component(kind, data.get(kind), defaults.get(kind)) for kind in SECTIONS}
        model = self._placement(model, parts["block"], placement)
        init = self._init(data.get("init"))
        if self.problems:
            error_cls = UnknownComponentError if self.unknown_component and len(self.problems) == 1 else SpecError
            raise error_cls(self.problems)
        return ModelSpec(model=model, init=init, source=self.file, **parts)

    def problem(self, path: str, message: str, hint: str | None = None) -> None:
        line = locate(self.text, path) if self.text else None
        self.problems.append(Problem(file=self.file, path=path, line=line, message=message, hint=hint))

    def _check_tables(self, data: dict[str, Any]) -> None:
        for key in data:
            if key not in TOP_LEVEL:
                self.problem(join("$", key), f"unknown table [{SHORT.repr(key)}]", did_you_mean(key, TOP_LEVEL))
        for key in TOP_LEVEL:
            if key in data and not isinstance(data[key], dict):
                self.problem(f"$.{key}", f"expected a table [{key}], found {describe(data[key])}")

    def _model(self, table: Any) -> ModelConfig | None:
        if table is None:
            self.problem("$.model", "missing required table [model]")
            return None
        if not isinstance(table, dict):
            return None
        model = self._structure(table, ModelConfig, "$.model")
        if model is None:  # the fields' own checks are reported; relate the fields that passed them
            reported = {(p.path, p.message) for p in self.problems}
            for error in cross_field_errors(_valid_fields(table, ModelConfig)):
                if (f"$.model.{error.field}", error.message) not in reported:
                    self.problem(f"$.model.{error.field}", error.message)
            return None
        oversized = _oversized(model) if model is not None else []
        for field_name, message in oversized:
            self.problem(f"$.model.{field_name}", message, "is this size a typo?")
        return None if oversized else model

    def _init(self, table: Any) -> InitConfig | None:
        if table is None:
            return InitConfig()
        return self._structure(table, InitConfig, "$.init") if isinstance(table, dict) else None

    def _placement(self, model: ModelConfig | None, block: ComponentSpec | None,
                   placement: str | None) -> ModelConfig | None:
        """[block] and [model] norm_placement say the same: "pre"/"post" agree, or the block sets the placement."""
        if model is None or block is None or block.name not in PLACEMENT_BLOCKS:
            return model
        if placement is not None and placement != block.name:
            self.problem("$.block.use", f"block {block.use!r} disagrees with [model] norm_placement = {placement!r}",
                         "give one of them, or make them agree")
            return None
        return model if model.norm_placement == block.name else attrs.evolve(model, norm_placement=block.name)

    def _component(self, kind: str, table: Any, default: str | None = None) -> ComponentSpec | None:
        if table is None and default is not None:
            table = {"use": default}
        if table is None:
            self.problem(f"$.{kind}", f"missing required table [{kind}]", f'add [{kind}] with use = "..."')
            return None
        if not isinstance(table, dict):
            return None
        fields = dict(table)
        use = fields.pop("use", None)
        component = self._resolve(kind, use, fields)
        if component is None:
            return None
        config = self._structure(fields, component.config_cls, f"$.{kind}")
        if config is None:
            return None
        pinned = component.distribution if ":" in use else None
        return ComponentSpec(kind=kind, name=component.name, distribution=pinned, config=config)

    def _resolve(self, kind: str, use: Any, fields: dict[str, Any]) -> Resolved | None:
        path = f"$.{kind}.use"
        if not isinstance(use, str):
            found = "nothing" if use is None else describe(use)
            names = ", ".join(repr(n) for n in self.resolver.names(kind)) or "none installed"
            typo = difflib.get_close_matches("use", [k for k in fields if isinstance(k, str)], n=1, cutoff=0.5)
            hint = f"found the key {SHORT.repr(typo[0])}: did you mean 'use'?" if typo and use is None else None
            self.problem(path, f"expected the name of a {kind} ({names}), found {found}", hint)
            return None
        found = self.resolver.resolve(kind, use)
        if isinstance(found, Unresolved):
            self.unknown_component = self.unknown_component or found.unknown
            self.problem(path, found.message, found.hint)
            return None
        return found

    def _structure(self, table: dict[str, Any], cls: type, path: str) -> Any:
        try:
            return CONVERTER.structure(table, cls)
        except Exception as error:  # a plugin's validator may raise anything; it becomes a located problem
            for where, message, hint in flatten(error, path, cls):
                self.problem(where, message, hint)
            return None


def _given_placement(table: Any) -> str | None:
    """[model] norm_placement as written, when it is one of the placements; None when absent (or reported)."""
    value = table.get("norm_placement") if isinstance(table, dict) else None
    return value if value in PLACEMENT_BLOCKS else None


_MODEL_HINTS = typing.get_type_hints(ModelConfig, include_extras=True)  # once: evaluating them compiles code


def _valid_fields(table: dict[str, Any], cls: type) -> dict[str, Any]:
    """Each field of ``cls`` that structures on its own (or its default when absent); failing ones left out."""
    hints = _MODEL_HINTS if cls is ModelConfig else typing.get_type_hints(cls, include_extras=True)
    valid = {}
    for attribute in attrs.fields(cls):
        key = attribute.alias  # the key a file writes ([model] head_dim)
        if key in table:
            try:
                valid[key] = CONVERTER.structure(table[key], hints[attribute.name])
            except Exception:  # reported already, by the whole-table pass
                continue
        elif attribute.default is not attrs.NOTHING:
            valid[key] = attribute.default
    return valid


MAX_TENSOR_ELEMENTS = 2**60  # 8-byte elements must still fit torch's 64-bit byte count


def _oversized(model: ModelConfig) -> list[tuple[str, str]]:
    """The core's own tensors that no device could hold: caught here, not as an overflow deep in torch."""
    qkv = (model.n_heads + 2 * model.kv_heads) * model.head_dim
    tensors = {
        "vocab_size": ("vocab_size × d_model", model.vocab_size * model.d_model),
        "context_length": ("context_length × d_model", model.context_length * model.d_model),
        "d_ff": ("2 × d_ff × d_model", 2 * model.d_ff * model.d_model),
        "d_model": ("d_model × (n_heads + 2 × n_kv_heads) × head_dim", model.d_model * qkv),
    }
    return [
        (name, f"{product} = {count:.3g} elements, more than one tensor can hold (2**60)")
        for name, (product, count) in tensors.items()
        if count > MAX_TENSOR_ELEMENTS
    ]


# ---------------------------------------------------------------- dumping


def spec_to_dict(spec: ModelSpec) -> dict[str, dict[str, Any]]:
    """The plain-dict form of a spec: what tomllib would give for its TOML."""
    document = {"model": _drop_none(CONVERTER.unstructure(spec.model))}
    for part in spec.components():
        if part.kind in ("block", "ffn") and _is_default(part, spec.model):
            continue  # written only when chosen: specs from before [block] and [ffn] dump as before
        document[part.kind] = {"use": part.use, **_drop_none(_drop_defaults(part.config))}
    if spec.init != InitConfig():  # written only when chosen: GPT-2's default dumps as before
        document["init"] = _drop_none(CONVERTER.unstructure(spec.init))
    return document


def _is_default(part: ComponentSpec, model: ModelConfig) -> bool:
    """The component a spec without the table gets: the pinned default, with its default config."""
    default = DEFAULT_FFN if part.kind == "ffn" else f"{BLOCKS_DISTRIBUTION}:{model.norm_placement}"
    if part.use != default:
        return False
    try:
        return part.config == type(part.config)()
    except TypeError:  # a config with required fields is never a default
        return False


def dump_spec(spec: ModelSpec) -> str:
    """TOML text that loads back to an equal spec."""
    return tomli_w.dumps(spec_to_dict(spec))


def _drop_defaults(config: Any) -> dict[str, Any]:
    """A config's table without the fields marked OMIT_DEFAULT that hold their default."""
    table = CONVERTER.unstructure(config)
    if attrs.has(type(config)):
        for attribute in attrs.fields(type(config)):
            if (attribute.metadata.get("blockspec.omit_default") and attribute.default is not attrs.NOTHING
                    and getattr(config, attribute.name) == attribute.default):
                table.pop(attribute.alias, None)
    return table


def _drop_none(table: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in table.items() if v is not None}
