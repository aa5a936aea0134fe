"""dict -> ModelSpec through the strict converter, and back to a dict and TOML.

Which components exist is the registry's business: the reader asks a ``Resolver`` for each
``use``, so this layer knows no plugin and imports no torch.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Protocol

import tomli_w
import attrs
from attrs import frozen

from blockspec.errors import Problem, SpecError, UnknownComponentError
from blockspec.spec import toml_read as toml_guard
from blockspec.spec.kinds import SECTIONS, WRAPPER_SECTIONS
from blockspec.spec.problems import close_match, did_you_mean, flatten, join, locate
from blockspec.spec.schema import (
    LAYER_KINDS,
    AdapterSpec,
    PLACEMENT_BLOCKS,
    ComponentChoice,
    ComponentSpec,
    InitConfig,
    LayerOverride,
    LayerRule,
    MergedTable,
    ModelConfig,
    ModelSpec,
    cross_field_errors,
    merged_table,
    placement_of,
)
from blockspec.spec.strict import CONVERTER, SHORT, describe

DEFAULT_ATTENTION = "blockspec:causal"  # pinned: a plugin that also registers "causal" cannot make it ambiguous
DEFAULT_FFN = "blockspec:dense"
OPTIONAL_TABLES = ("init",)
LAYERS = "layers"  # the [[layers]] array of tables: per-layer overrides
ADAPTERS = WRAPPER_SECTIONS["adapter"]  # the [[adapters]] array of tables: what wraps the built model's layers
ARRAYS = (LAYERS, ADAPTERS)
TOP_LEVEL = ("model", *SECTIONS, *OPTIONAL_TABLES, *ARRAYS)
SELECTORS = ("index", "every", "offset", "from", "to")  # as written; "from"/"to" are LayerRule's start/stop
SELECTOR_MINIMUM = {"index": 0, "every": 1, "offset": 0, "from": 0, "to": 0}  # the least layer number or step
MODEL_WIDE = {  # kinds a [[layers]] entry may not vary, and why
    "head": "head is model-wide: the model has one output layer",
}


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


def _spec_in_directory_hint(folder: Path) -> str:
    """What a user who gave a folder likely meant: a .toml file in it (a checkpoint's spec is one)."""
    found = sorted(folder.glob("*.toml"))
    return "give a .toml file" + (f", e.g. {found[0]}" if found else "")


def read_spec_text(path: str | Path) -> str:
    """A spec file as UTF-8 text; reads at most one byte past the size limit."""
    path = Path(path)
    if path.is_dir():
        raise SpecError(Problem(file=str(path), message="is a directory, not a spec file",
                                hint=_spec_in_directory_hint(path)))
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


def default_uses(placement: str | None = None) -> dict[str, str]:
    """The component each kind with a default gets when its table is absent; the other kinds' tables are required."""
    return {"attention": DEFAULT_ATTENTION, "ffn": DEFAULT_FFN, "block": PLACEMENT_BLOCKS[placement or "pre"]}


class _SpecReader:
    """Collects problems across all tables before failing, so a user sees them all at once."""

    def __init__(self, resolver: Resolver, file: str | None, text: str | None) -> None:
        self.resolver = resolver
        self.file = file
        self.text = text
        self.problems: list[Problem] = []
        self.unknown_component = False
        self.tables: dict[str, dict[str, Any]] = {}  # each kind's table as written (its default filled in)
        self.resolved: dict[tuple[str, str], Resolved | Unresolved] = {}

    def read(self, data: dict[str, Any]) -> ModelSpec:
        self._check_tables(data)
        model = self._model(data.get("model"))
        placement = _given_placement(data.get("model"))
        defaults = default_uses(placement)
        parts = {kind: self._component(kind, data.get(kind), defaults.get(kind)) for kind in SECTIONS}
        model = self._placement(model, parts["block"], placement)
        init = self._init(data.get("init"))
        rules = _LayerReader(self, model, parts).read(data.get(LAYERS))
        adapters = self._adapters(data.get(ADAPTERS))
        if self.problems:
            error_cls = UnknownComponentError if self.unknown_component and len(self.problems) == 1 else SpecError
            raise error_cls(self.problems)
        return ModelSpec(model=model, init=init, source=self.file, layers=rules, adapters=adapters, **parts)

    def problem(self, path: str, message: str, hint: str | None = None) -> None:
        self.add(Problem(path=path, message=message, hint=hint))

    def add(self, problem: Problem) -> None:
        """``problem`` located in this file (its line found from its path)."""
        line = locate(self.text, problem.path) if self.text and problem.path else None
        self.problems.append(attrs.evolve(problem, file=self.file, line=line))

    def _check_tables(self, data: dict[str, Any]) -> None:
        for key in data:
            if key not in TOP_LEVEL:
                self.problem(join("$", key), f"unknown table [{SHORT.repr(key)}]", did_you_mean(key, TOP_LEVEL))
        for key in TOP_LEVEL:
            if key in ARRAYS:
                if key in data and not (isinstance(data[key], list) and all(isinstance(e, dict) for e in data[key])):
                    self.problem(f"$.{key}", f"expected an array of tables [[{key}]], found {describe(data[key])}")
                continue
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
        """The alias, read once: [model] norm_placement names the core's block (the default [block] above),
        and a [block] that is one of those sets the placement; given both, they must agree."""
        named = placement_of(block) if block is not None else None
        if model is None or named is None:
            return model
        if placement is not None and placement != named:
            self.problem("$.block.use", f"block {block.use!r} disagrees with [model] norm_placement = {placement!r}",
                         "give one of them, or make them agree")
            return None
        return model if model.norm_placement == named else attrs.evolve(model, norm_placement=named)

    def _component(self, kind: str, table: Any, default: str | None = None) -> ComponentSpec | None:
        if table is None and default is not None:
            table = {"use": default}
        if table is None:
            self.problem(f"$.{kind}", f"missing required table [{kind}]", f'add [{kind}] with use = "..."')
            return None
        if not isinstance(table, dict):
            return None
        self.tables[kind] = table
        fields = dict(table)
        use = fields.pop("use", None)
        component = self._resolve(kind, use, fields)
        if component is None:
            return None
        config = self._structure(fields, component.config_cls, f"$.{kind}")
        return None if config is None else _choice(kind, use, component).of(config)

    def _adapters(self, entries: Any) -> tuple[AdapterSpec, ...]:
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            return ()  # absent, or reported by _check_tables
        found = [self._adapter(k, entry) for k, entry in enumerate(entries)]
        return tuple(entry for entry in found if entry is not None)

    def _adapter(self, k: int, entry: dict[str, Any]) -> AdapterSpec | None:
        """One [[adapters]] entry: ``use``, ``targets`` (a non-empty array of patterns), the component's options."""
        path, fields = f"$.{ADAPTERS}[{k}]", dict(entry)
        use, targets = fields.pop("use", None), fields.pop("targets", None)
        component = self._resolve("adapter", use, fields, path=join(path, "use"))
        if targets is None:
            typo = close_match("targets", [key for key in fields if isinstance(key, str)], cutoff=0.5)
            self.problem(join(path, "targets"), "missing required key 'targets'",
                         f"did you mean 'targets' for {typo!r}?" if typo else
                         'add targets = ["blocks.*.attn.qkv"] (module paths) or ["@attention"] (a kind\'s layers)')
            fields.pop(typo, None)
        elif not (isinstance(targets, list) and targets and all(isinstance(t, str) and t for t in targets)):
            self.problem(join(path, "targets"), f"expected a non-empty array of module-path patterns, "
                                                 f"found {describe(targets)}")
        config = self._structure(fields, component.config_cls, path) if component is not None else None
        if config is None or not isinstance(targets, list):
            return None
        choice = _choice("adapter", use, component)
        return AdapterSpec(kind="adapter", name=choice.name, distribution=choice.distribution, config=config,
                           targets=tuple(targets))

    def _resolve(self, kind: str, use: Any, fields: dict[str, Any], path: str | None = None) -> Resolved | None:
        path = path or f"$.{kind}.use"
        if not isinstance(use, str):
            found = "nothing" if use is None else describe(use)
            names = ", ".join(repr(n) for n in self.resolver.names(kind)) or "none installed"
            typo = close_match("use", [k for k in fields if isinstance(k, str)], cutoff=0.5)
            hint = f"found the key {SHORT.repr(typo)}: did you mean 'use'?" if typo and use is None else None
            self.problem(path, f"expected the name of a {kind} ({names}), found {found}", hint)
            return None
        if (kind, use) not in self.resolved:  # once per distinct component, however many layers name it
            self.resolved[kind, use] = self.resolver.resolve(kind, use)
        found = self.resolved[kind, use]
        if isinstance(found, Unresolved):
            self.unknown_component = self.unknown_component or found.unknown
            self.problem(path, found.message, found.hint)
            return None
        return found

    def _structure(self, table: dict[str, Any], cls: type, path: str) -> Any:
        try:
            return CONVERTER.structure(table, cls)
        except Exception as error:  # a plugin's validator may raise anything; it becomes a located problem
            for problem in flatten(error, path, cls):
                self.add(problem)
            return None


class _LayerReader:
    """The [[layers]] entries: their selectors and tables, then each layer's tables merged and checked.

    A layer's table of a kind is ``merged_table``'s (schema.py), the one rule ModelSpec derives
    its layers by. Each distinct merged table is checked once; its problems name the entry that
    wrote the field and the layers they occur in.
    """

    def __init__(self, reader: _SpecReader, model: ModelConfig | None, parts: dict[str, ComponentSpec | None]) -> None:
        self.reader, self.model, self.parts = reader, model, parts
        self.seen: dict[str, list[tuple[str, str, str | None]]] = {}  # each distinct merged table -> its problems
        self.found: dict[tuple[str, str, str | None], list[int]] = {}  # (path, message, hint) -> layers

    def read(self, entries: Any) -> tuple[LayerRule, ...]:
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            return ()  # absent, or reported by _check_tables
        rules = [self._rule(k, entry) for k, entry in enumerate(entries)]
        if not rules or self.model is None:
            return ()
        for i in range(self.model.n_layers):
            self._check_layer(i, rules)
        for (path, message, hint), where in self.found.items():
            which = f"layer {where[0]}" if len(where) == 1 else "layers " + number_ranges(where)
            self.reader.problem(path, f"{message} ({which})", hint)
        return () if None in rules else tuple(rules)  # type: ignore[arg-type]

    def _rule(self, k: int, entry: dict[str, Any]) -> LayerRule | None:
        problem, path = self.reader.problem, f"$.layers[{k}]"
        before = len(self.reader.problems)
        for key in entry:
            if key in MODEL_WIDE:
                problem(join(path, key), MODEL_WIDE[key], f"vary one of {', '.join(LAYER_KINDS)}")
            elif key not in SELECTORS and key not in LAYER_KINDS:
                problem(join(path, key), f"unknown key {SHORT.repr(key)}",
                        did_you_mean(key, (*SELECTORS, *LAYER_KINDS))
                        or f"expected a selector ({', '.join(SELECTORS)}) or a table of {', '.join(LAYER_KINDS)}")
        index = entry.get("index")
        if index is not None and not (isinstance(index, list) and index and all(_layer_number(v) for v in index)):
            problem(join(path, "index"), f"expected an array of layer numbers (integers >= 0), found {describe(index)}")
        for key in ("every", "offset", "from", "to"):
            value, least = entry.get(key), SELECTOR_MINIMUM[key]
            if value is not None and not (type(value) is int and value >= least):
                problem(join(path, key), f"expected an integer >= {least}, found {describe(value)}")
        given = [key for key in SELECTORS if key in entry]
        if not given:
            problem(path, "selects no layers", "add index = [...], every = k (with offset = j), from = i or to = i")
        elif "index" in given and len(given) > 1:
            problem(join(path, "index"), "index lists its layers itself: give it alone",
                    "or drop it for every, offset, from and to")
        elif "offset" in given and "every" not in given:
            problem(join(path, "offset"), "offset counts in steps of every: add every")
        overrides = {kind: entry[kind] for kind in LAYER_KINDS if kind in entry}
        for kind, table in overrides.items():
            if not isinstance(table, dict):
                problem(join(path, kind), f"expected a table of {kind} fields, found {describe(table)}")
        if not overrides and len(self.reader.problems) == before:
            problem(path, "changes nothing", "add a table of the fields to change, e.g. attention = { ... }")
        tables = {kind: self._override(join(path, kind), kind, table) for kind, table in overrides.items()
                  if isinstance(table, dict)}
        if len(self.reader.problems) > before:
            return None
        rule = LayerRule(index=tuple(index) if index is not None else None, every=entry.get("every"),
                         offset=entry.get("offset"), start=entry.get("from"), stop=entry.get("to"),
                         overrides=tables)
        return rule if self.model is None or self._in_range(rule, path) else None

    def _override(self, path: str, kind: str, table: dict[str, Any]) -> LayerOverride:
        """An entry's table of one kind; a ``use`` in it is resolved here, once, at the entry that gives it."""
        fields = dict(table)
        if "use" not in fields:
            return LayerOverride(fields=fields)
        use = fields.pop("use")
        component = self.reader._resolve(kind, use, fields, path=join(path, "use"))
        return LayerOverride(fields=fields, use=_choice(kind, use, component) if component is not None else None)

    def _in_range(self, rule: LayerRule, path: str) -> bool:
        n = self.model.n_layers
        outside = f"the model has {n} layers" + (f" (0 to {n - 1})" if n else "")
        bad = [(join(path, "index"), v) for v in rule.index or () if v >= n]
        bad += [(join(path, key), v) for key, v in (("from", rule.start), ("to", rule.stop)) if v is not None and v >= n]
        for where, value in bad:
            self.reader.problem(where, f"layer {value} does not exist: {outside}")
        if not bad and not rule.layers(n):
            self.reader.problem(path, f"selects no layer: {outside}")
            return False
        return not bad

    def _check_layer(self, i: int, rules: list[LayerRule | None]) -> None:
        for kind in LAYER_KINDS:
            base = self.parts[kind]
            merged = merged_table(base, rules, kind, i) if base is not None else None  # None: reported already
            if merged is None:
                continue
            key = repr((merged.choice, merged.fields, merged.origin))
            if key not in self.seen:
                self.seen[key] = self._problems(kind, merged)
            for found in self.seen[key]:
                self.found.setdefault(found, []).append(i)

    def _problems(self, kind: str, merged: MergedTable) -> list[tuple[str, str, str | None]]:
        """What structuring the merged table reports, each at the entry that wrote the field."""
        reader, kept = self.reader, self.reader.problems
        reader.problems = []
        try:
            reader._structure(merged.fields, merged.choice.config_cls, "$.@")
            problems = reader.problems
        finally:
            reader.problems = kept

        def where(path: str) -> str:
            rest = path.removeprefix("$.@")
            name = rest[1:].split(".")[0].split("[")[0] if rest.startswith(".") else None
            k = merged.origin.get(name) if name in merged.origin else None
            return f"$.layers[{merged.last if k is None else k}].{kind}{rest}"

        return [(where(p.path or "$.@"), p.message, p.hint) for p in problems]


def _choice(kind: str, use: str, component: Resolved) -> ComponentChoice:
    """What ``use`` chose: the component, pinned to its distribution when ``use`` names one."""
    pinned = component.distribution if ":" in use else None
    return ComponentChoice(kind=kind, name=component.name, distribution=pinned, config_cls=component.config_cls)


def _layer_number(value: Any) -> bool:
    return type(value) is int and value >= SELECTOR_MINIMUM["index"]


def number_ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 4] -> "0-2, 4": a set of layers as messages and `blockspec show` write it."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def _given_placement(table: Any) -> str | None:
    """[model] norm_placement as written, when it is one of the placements; None when absent (or reported)."""
    value = table.get("norm_placement") if isinstance(table, dict) else None
    named = isinstance(value, str) and value in PLACEMENT_BLOCKS  # a list or table is unhashable: not a name
    return value if named else None  # a value that names no block: [model]'s check reports it


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
        document[part.kind] = component_table(part)
    if spec.init != InitConfig():  # written only when chosen: GPT-2's default dumps as before
        document["init"] = _drop_none(CONVERTER.unstructure(spec.init))
    if spec.layers:  # written only when given: specs without [[layers]] dump as before
        document[LAYERS] = [_rule_dict(rule) for rule in spec.layers]
    if spec.adapters:  # written only when given: specs without [[adapters]] dump as before
        document[ADAPTERS] = [_adapter_dict(entry) for entry in spec.adapters]
    return document


def component_table(part: ComponentSpec) -> dict[str, Any]:
    """One component's table as a spec file writes it: ``use``, then the fields that say something."""
    return {"use": part.use, **_drop_none(_drop_defaults(part.config))}


def _adapter_dict(entry: AdapterSpec) -> dict[str, Any]:
    """One [[adapters]] entry as written: ``use``, ``targets``, then the options."""
    table = component_table(entry)
    return {"use": table.pop("use"), "targets": list(entry.targets), **table}


def _rule_dict(rule: LayerRule) -> dict[str, Any]:
    """One [[layers]] entry as written: its selector, then its override tables."""
    selector = {"index": list(rule.index) if rule.index is not None else None, "every": rule.every,
                "offset": rule.offset, "from": rule.start, "to": rule.stop}
    return {**_drop_none(selector), **{kind: _override_dict(table) for kind, table in rule.overrides.items()}}


def _override_dict(override: LayerOverride) -> dict[str, Any]:
    """A [[layers]] kind's table; a None field is left out, as TOML has no null (a ``use`` table's None field
    is its default, which the reader then takes)."""
    fields = _drop_none(override.fields)
    return {"use": override.use.use, **fields} if override.use is not None else fields


def _is_default(part: ComponentSpec, model: ModelConfig) -> bool:
    """The component a spec without the table gets: the pinned default, with its default config."""
    default = DEFAULT_FFN if part.kind == "ffn" else PLACEMENT_BLOCKS[model.norm_placement]
    if part.use != default:
        return False
    try:
        return part.config == type(part.config)()
    except TypeError:  # a config with required fields is never a default
        return False


def dump_spec(spec: ModelSpec) -> str:
    """TOML text that loads back to an equal spec; [[layers]] entries last, as a reader writes them."""
    document = spec_to_dict(spec)
    entries = document.pop(LAYERS, [])
    if any(isinstance(value, dict) for entry in entries for table in entry.values() if isinstance(table, dict)
           for value in table.values()):  # a nested table in an override: let tomli_w choose the layout
        return tomli_w.dumps({**document, LAYERS: entries})
    return tomli_w.dumps(document) + "".join(_entry_text(entry) for entry in entries)


def _entry_text(entry: dict[str, Any]) -> str:
    """``[[layers]]`` with its selector, then a ``[layers.<kind>]`` sub-table per override."""
    selector = {k: v for k, v in entry.items() if not isinstance(v, dict)}
    text = f"\n[[{LAYERS}]]\n" + tomli_w.dumps(selector)
    for kind, table in entry.items():
        if isinstance(table, dict):
            text += f"\n[{LAYERS}.{kind}]\n" + tomli_w.dumps(table)
    return text


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
