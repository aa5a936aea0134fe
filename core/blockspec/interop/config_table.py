"""A family's config.json as one table, so reading, writing and the export check cannot drift apart.

Each ``Key`` states one config.json key once (or, for a compound one such as the rope, the few keys
transformers reads together): how it is read into the spec dict, what it writes back from a spec,
and what it lets the family express (``interop.family.Expresses``). A ``Table`` is the family's keys
in reading order, with the spec tables no key decides (``frame``) and what the family expresses
without a key (``has``). A family that differs from its base says only the difference:
``BASE.but(key, ...)`` replaces the keys of the same name and appends new ones, ``without(name)``
drops one. This is the weight map's idea (``interop.weight_map.Rule``: one table, both directions)
applied to config.json.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from attrs import field, frozen

from blockspec.interop.config_reader import REQUIRED, ConfigReader
from blockspec.interop.family import Expresses, Family, same_name, tied_head_copy
from blockspec.interop.weight_map import Rule
from blockspec.spec.schema import ModelSpec

Document = dict[str, Any]  # the spec dict being read: {"model": {...}, "attention": {...}, ...}
Read = Callable[[ConfigReader, Document, str], None]  # (reader, document, the family's title)
Write = Callable[[ModelSpec], dict[str, Any]]  # spec -> the config.json keys it writes


def nothing(spec: ModelSpec) -> dict[str, Any]:
    """The writer of a key the family reads but never writes."""
    return {}


def no_misfits(spec: ModelSpec) -> list[str]:
    return []


@frozen(kw_only=True)
class Key:
    """One config.json key (or a few read together): read, write and capability stated once."""

    name: str  # the config.json key (a compound's first), or what a keyless entry derives
    read: Read
    write: Write = nothing
    expresses: Mapping[str, Any] = field(factory=dict, converter=dict)  # Expresses fields this key makes true
    misfits: Callable[[ModelSpec], list[str]] = no_misfits  # export checks beyond Expresses'


def put(document: Document, at: str, value: Any) -> None:
    """``document["model"]["d_model"] = value`` for ``at = "model.d_model"``."""
    table, name = at.split(".")
    document.setdefault(table, {})[name] = value


def spec_value(spec: ModelSpec, at: str) -> Any:
    """The spec's value at a spec-dict path: ``model.d_model`` -> spec.model.d_model, ``norm.eps`` ->
    spec.norm.config.eps."""
    table, name = at.split(".")
    holder = spec.model if table == "model" else getattr(spec, table).config
    return getattr(holder, name)


def mapped(name: str, at: str, kind: type, default: Any = REQUIRED, *, aliases: tuple[str, ...] = (),
           written_too: tuple[str, ...] = (), **expresses: Any) -> Key:
    """A key that is one spec value (``at``: its spec-dict path), read under ``name`` or older ``aliases``,
    and written under ``name`` and ``written_too``."""
    def read(r: ConfigReader, document: Document, title: str) -> None:
        put(document, at, r.get(name, kind, default, aliases=aliases))

    def write(spec: ModelSpec) -> dict[str, Any]:
        return dict.fromkeys((name, *written_too), spec_value(spec, at))

    return Key(name=name, read=read, write=write, expresses=expresses)


def accepted(name: str, written: Callable[[ModelSpec], Any] | None = None) -> Key:
    """A key that does not change what the model computes (a training-only dropout, a tensor-parallel split):
    read as given, and written as ``written(spec)`` when the family writes it."""
    def write(spec: ModelSpec) -> dict[str, Any]:
        return {} if written is None else {name: written(spec)}

    return Key(name=name, read=lambda r, document, title: r.accept(name), write=write)


def folded_dropout(name: str) -> Key:
    """A training-only dropout rate that blockspec folds into its one [model] dropout: read as given (an
    eval-mode forward does not use it), written as that rate."""
    return accepted(name, lambda spec: spec.model.dropout)


def fixed(name: str, expected: bool, message: str) -> Key:
    """A switch the family has one way only: another value is refused (``message``), and ``expected`` written."""
    def read(r: ConfigReader, document: Document, title: str) -> None:
        value = r.get(name, bool, expected)
        if value is not None and value != expected:
            r.problem(name, message, f"expected {str(expected).lower()}")

    return Key(name=name, read=read, write=lambda spec: {name: expected})


def norm_eps(name: str, use: str, default: float) -> Key:
    """The norms' epsilon under ``name``; it also says which norm the family has (``use``)."""
    def read(r: ConfigReader, document: Document, title: str) -> None:
        document.setdefault("norm", {}).update(use=use, eps=r.get(name, float, default))  # the frame's options kept

    return Key(name=name, read=read, write=lambda spec: {name: spec.norm.config.eps}, expresses={"norm": use})


def tied(default: bool = False) -> Key:
    """tie_word_embeddings, every transformers config's: the head is the embedding."""
    return mapped("tie_word_embeddings", "head.tied", bool, default)


@frozen(kw_only=True)
class Table:
    """A family's config.json: its keys in reading order, the spec tables they fill in, and what it
    expresses with no key of its own."""

    keys: tuple[Key, ...] = field(converter=tuple)
    frame: Mapping[str, Mapping[str, Any]] = field(factory=dict, converter=dict)  # spec tables before any key
    has: Mapping[str, Any] = field(factory=dict, converter=dict)  # Expresses fields no key states

    def __attrs_post_init__(self) -> None:
        names = [key.name for key in self.keys]
        if len(set(names)) != len(names):
            raise ValueError(f"a key is stated twice: {sorted(n for n in names if names.count(n) > 1)}")

    def but(self, *keys: Key, frame: Mapping[str, Mapping[str, Any]] | None = None, **has: Any) -> Table:
        """This table with ``keys`` in place of those of the same name (new names appended), ``frame``'s tables
        replacing the frame's, and ``has`` over its own."""
        new = {key.name: key for key in keys}
        kept = [new.pop(key.name, key) for key in self.keys]
        return Table(keys=(*kept, *new.values()), frame={**self.frame, **(frame or {})}, has={**self.has, **has})

    def without(self, *names: str) -> Table:
        return Table(keys=[key for key in self.keys if key.name not in names], frame=self.frame, has=self.has)

    def read(self, r: ConfigReader, name: str, title: str) -> Document:
        """config.json -> the spec dict, each key read in order into the frame; [[layers]] only when set."""
        document: Document = {table: dict(values) for table, values in self.frame.items()}  # flat: a copy each
        document.setdefault("model", {})["name"] = name
        for key in self.keys:
            key.read(r, document, title)
        return document

    def write(self, spec: ModelSpec) -> dict[str, Any]:
        """spec -> config.json's architecture keys, in the table's order."""
        return {name: value for key in self.keys for name, value in key.write(spec).items()}

    def expresses(self) -> Expresses:
        """What the family's config.json can say, from its keys (and ``has``), for the export checks."""
        fields = dict(self.has)
        for key in self.keys:
            fields.update(key.expresses)
        return Expresses(**fields)

    def misfits(self, spec: ModelSpec) -> list[str]:
        """Why ``spec`` cannot be written as this table; empty: it can."""
        return self.expresses().misfits(spec) + [p for key in self.keys for p in key.misfits(spec)]


def table_family(*, name: str, title: str, architecture: str, model_type: str, table: Table,
                 rules: Callable[[ModelSpec], list[Rule]], layer_index: str,
                 ignored: Callable[[str, ModelSpec], bool] = tied_head_copy,
                 normalize_name: Callable[[str], str] = same_name) -> Family:
    """The ``Family`` whose config.json is ``table``: read, written and checked from it."""
    def config_json(spec: ModelSpec) -> dict[str, Any]:
        return {"architectures": [architecture], "model_type": model_type, **table.write(spec)}

    return Family(name=name, title=title, architectures={architecture: model_type},
                  spec_dict=lambda r, spec_name: table.read(r, spec_name, title), misfits=table.misfits,
                  config_json=config_json, rules=rules, layer_index=layer_index, ignored=ignored,
                  normalize_name=normalize_name)

