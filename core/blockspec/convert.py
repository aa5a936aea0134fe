"""TOML -> dict -> ModelSpec, and back: the one private, strict cattrs converter."""

from __future__ import annotations

import difflib
import json
import math
import re
import reprlib
import tomllib
import typing
from pathlib import Path
from typing import Any, Literal

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from . import toml_guard, toml_text
from .catalogue import catalogue, provider_of
from .errors import FieldError, Problem, SpecError, UnknownComponentError
from .kinds import SECTIONS
from .policy import normalize
from .registry import Component, Registry
from .spec import ComponentSpec, ModelConfig, ModelSpec

DEFAULT_ATTENTION = "blockspec:causal"  # pinned: a plugin that also registers "causal" cannot make it ambiguous
TOP_LEVEL = ("model", *SECTIONS)
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # TOML integers are 64-bit; tomllib does not enforce it


def _strict_converter() -> cattrs.Converter:
    """No silent coercion ("false" -> True, 64.9 -> 64) and no ignored keys."""
    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    converter.register_structure_hook(int, _structure_int)
    converter.register_structure_hook(float, _structure_float)
    converter.register_structure_hook(bool, _structure_bool)
    converter.register_structure_hook(str, _structure_str)
    converter.register_structure_hook_func(_is_literal, _structure_literal)
    return converter


class _ShortRepr(reprlib.Repr):
    """reprlib with small limits; huge ints are described, not printed (str() refuses 4300+ digits)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother = 2, 60, 60
        self.maxlist = self.maxdict = self.maxtuple = self.maxset = 4

    def repr_int(self, value: int, level: int) -> str:
        bits = value.bit_length()
        return f"<{bits}-bit integer>" if bits > 64 else repr(value)


_SHORT = _ShortRepr()


def _found(value: Any) -> str:
    """A bounded description: a 10,000-deep or megabyte value must not blow up a message."""
    return f"{type(value).__name__} {_SHORT.repr(value)}"


def _structure_int(value: Any, _: type) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, found {_found(value)}")
    _check_int64(value)
    return value


def _check_int64(value: int) -> None:
    if not INT_MIN <= value <= INT_MAX:
        raise ValueError("expected an integer in [-2**63, 2**63 - 1] (TOML integers are 64-bit), "
                         f"found a {value.bit_length()}-bit integer")


def _structure_float(value: Any, _: type) -> float:
    """Ints are accepted only where the float is exact; inf and nan never are."""
    if type(value) not in (int, float):
        raise TypeError(f"expected a number, found {_found(value)}")
    if type(value) is int:
        _check_int64(value)
        if float(value) != value:
            raise ValueError(f"expected a number a float holds exactly, found int {value}; write it as a float")
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, found {_found(value)}")
    return float(value)


def _structure_bool(value: Any, _: type) -> bool:
    if type(value) is not bool:
        raise TypeError(f"expected true or false, found {_found(value)}")
    return value


def _structure_str(value: Any, _: type) -> str:
    if type(value) is not str:
        raise TypeError(f"expected a string, found {_found(value)}")
    return value


def _is_literal(tp: Any) -> bool:
    return typing.get_origin(tp) is Literal


def _structure_literal(value: Any, tp: Any) -> Any:
    choices = typing.get_args(tp)
    if type(value) not in {type(c) for c in choices} or value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"expected one of {listed}, found {_found(value)}")
    return value


_CONVERTER = _strict_converter()


# ---------------------------------------------------------------- loading


def load_spec(path: str | Path, registry: Registry | None = None) -> ModelSpec:
    """Read, parse and validate a TOML spec file; every problem is reported at once."""
    path = Path(path)
    return loads_spec(_read_text(path), registry, file=str(path))


def _read_text(path: Path) -> str:
    """The file as UTF-8 text; reads at most one byte past the size limit."""
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


def loads_spec(text: str, registry: Registry | None = None, *, file: str | None = None) -> ModelSpec:
    """Parse and validate TOML text; ``file`` names it in messages."""
    toml_guard.check_text(text, file)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecError(_syntax_problem(error, file, text)) from None
    except RecursionError:  # the guard bounds nesting; these two are the parser's own limits, kept as backstops
        raise SpecError(Problem(file=file, line=1, message="invalid TOML: nested too deeply")) from None
    except ValueError as error:  # e.g. an integer past Python's 4300-digit conversion limit
        raise SpecError(Problem(file=file, line=1, message=f"invalid TOML: {str(error)[:120]}")) from None
    return structure_spec(data, registry, file=file, text=text)


def _syntax_problem(error: tomllib.TOMLDecodeError, file: str | None, text: str) -> Problem:
    message = str(error)
    line, column = toml_guard.line_and_column(text, len(text))  # tomllib says "(at end of document)"
    if "(at line " in message:
        message, _, where = message.rpartition(" (at line ")
        line_text, _, column_text = where.rstrip(")").partition(", column ")
        line, column = int(line_text), int(column_text)
    message = message.removesuffix(" (at end of document)")
    return Problem(file=file, line=line, column=column, message=f"invalid TOML: {message}")


def structure_spec(
    data: dict[str, Any],
    registry: Registry | None = None,
    *,
    file: str | None = None,
    text: str | None = None,
) -> ModelSpec:
    """A plain dict (as tomllib gives it) -> a validated ModelSpec, or SpecError listing every problem."""
    if registry is None:
        from .plugins import load_registry

        registry = load_registry()
    if not isinstance(data, dict):
        raise SpecError(Problem(file=file, path="$", message=f"expected a table of tables, found {_found(data)}"))
    reader = _SpecReader(registry, file, text)
    return reader.read(data)


class _SpecReader:
    """Collects problems across all tables before failing, so a user sees them all at once."""

    def __init__(self, registry: Registry, file: str | None, text: str | None) -> None:
        self.registry = registry
        self.file = file
        self.text = text
        self.problems: list[Problem] = []
        self.unknown_component = False

    def read(self, data: dict[str, Any]) -> ModelSpec:
        self._check_tables(data)
        model = self._model(data.get("model"))
        parts = {kind: self._component(kind, data.get(kind)) for kind in SECTIONS}
        if self.problems:
            error_cls = UnknownComponentError if self.unknown_component and len(self.problems) == 1 else SpecError
            raise error_cls(self.problems)
        return ModelSpec(model=model, source=self.file, **parts)

    def problem(self, path: str, message: str, hint: str | None = None) -> None:
        line = _locate(self.text, path) if self.text else None
        self.problems.append(Problem(file=self.file, path=path, line=line, message=message, hint=hint))

    def _check_tables(self, data: dict[str, Any]) -> None:
        for key in data:
            if key not in TOP_LEVEL:
                self.problem(_join("$", key), f"unknown table [{_SHORT.repr(key)}]", _did_you_mean(key, TOP_LEVEL))
        for key in TOP_LEVEL:
            if key in data and not isinstance(data[key], dict):
                self.problem(f"$.{key}", f"expected a table [{key}], found {_found(data[key])}")

    def _model(self, table: Any) -> ModelConfig | None:
        if table is None:
            self.problem("$.model", "missing required table [model]")
            return None
        model = self._structure(table, ModelConfig, "$.model") if isinstance(table, dict) else None
        oversized = _oversized(model) if model is not None else []
        for field_name, message in oversized:
            self.problem(f"$.model.{field_name}", message, "is this size a typo?")
        return None if oversized else model

    def _component(self, kind: str, table: Any) -> ComponentSpec | None:
        if table is None and kind == "attention":
            table = {"use": DEFAULT_ATTENTION}
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

    def _resolve(self, kind: str, use: Any, fields: dict[str, Any]) -> Component | None:
        path = f"$.{kind}.use"
        if not isinstance(use, str):
            found = "nothing" if use is None else _found(use)
            names = ", ".join(repr(n) for n in self.registry.names(kind)) or "none installed"
            typo = difflib.get_close_matches("use", [k for k in fields if isinstance(k, str)], n=1, cutoff=0.5)
            hint = f"found the key {_SHORT.repr(typo[0])}: did you mean 'use'?" if typo and use is None else None
            self.problem(path, f"expected the name of a {kind} ({names}), found {found}", hint)
            return None
        distribution, _, name = use.rpartition(":")
        providers = self.registry.providers(kind, name)
        if distribution:
            providers = tuple(c for c in providers if c.distribution == distribution)
        if len(providers) == 1:
            return providers[0]
        if len(providers) > 1:
            both = " and ".join(c.distribution for c in providers)
            self.problem(path, f"{kind} {name!r} is provided by {both}",
                         f'pin one, e.g. use = "{providers[0].qualified_name}"')
            return None
        self._unknown(kind, name, distribution or None)
        return None

    def _unknown(self, kind: str, name: str, distribution: str | None) -> None:
        self.unknown_component = True
        path = f"$.{kind}.use"
        provider = provider_of(kind, name)
        if self.registry.providers(kind, name) and distribution:
            others = ", ".join(c.distribution for c in self.registry.providers(kind, name))
            self.problem(path, f"{kind} {name!r} is not provided by {distribution!r}", f"it is provided by {others}")
            return
        skipped = self._skipped(provider) if provider else None
        if skipped:
            self.problem(path, f"{kind} {name!r} is not loaded: {provider} {skipped.reason}",
                         "select it with BLOCKSPEC_PLUGINS or the registry file's [policy]")
            return
        if provider:
            cause = self._quarantine_cause(provider)
            message = f"{kind} {name!r} is not installed" + (f" ({cause})" if cause else "")
            self.problem(path, message, f"install the distribution {provider}{_install_hint(provider)}")
            return
        suggestion = self.registry.suggest(kind, name)
        hint = None
        if suggestion:
            source = self.registry.providers(kind, suggestion)[0].distribution
            hint = f"did you mean {suggestion!r}? (provided by {source})"
        elif self.registry.names(kind):
            hint = "installed: " + ", ".join(self.registry.names(kind))
        self.problem(path, f"unknown {kind} {name!r}", hint)

    def _skipped(self, distribution: str) -> Any:
        wanted = normalize(distribution)
        return next((s for s in self.registry.skipped if normalize(s.distribution) == wanted), None)

    def _quarantine_cause(self, distribution: str) -> str | None:
        for entry in self.registry.quarantined:
            if normalize(entry.distribution) == normalize(distribution):
                return f"{distribution} was quarantined: {entry.cause}"
        return None

    def _structure(self, table: dict[str, Any], cls: type, path: str) -> Any:
        try:
            return _CONVERTER.structure(table, cls)
        except Exception as error:  # a plugin's validator may raise anything; it becomes a located problem
            for where, message, hint in _flatten(error, path, cls):
                self.problem(where, message, hint)
            return None


MAX_TENSOR_ELEMENTS = 2**60  # 8-byte elements must still fit torch's 64-bit byte count


def _oversized(model: ModelConfig) -> list[tuple[str, str]]:
    """The core's own tensors that no device could hold: caught here, not as an overflow deep in torch."""
    qkv = model.d_model + 2 * model.kv_heads * model.head_dim
    tensors = {
        "vocab_size": ("vocab_size × d_model", model.vocab_size * model.d_model),
        "context_length": ("context_length × d_model", model.context_length * model.d_model),
        "d_ff": ("2 × d_ff × d_model", 2 * model.d_ff * model.d_model),
        "d_model": ("d_model × (d_model + 2 × n_kv_heads × head_dim)", model.d_model * qkv),
    }
    return [
        (name, f"{product} = {count:.3g} elements, more than one tensor can hold (2**60)")
        for name, (product, count) in tensors.items()
        if count > MAX_TENSOR_ELEMENTS
    ]


def _flatten(error: BaseException, path: str, cls: type | None) -> list[tuple[str, str, str | None]]:
    """cattrs' exception groups -> (path, message, hint) triples."""
    if isinstance(error, (ClassValidationError, IterableValidationError)):
        found = []
        for inner in error.exceptions:
            found += _flatten(inner, _inner_path(inner, path), getattr(error, "cl", cls))
        return found
    if isinstance(error, ForbiddenExtraKeysError):
        allowed = [a.name for a in attrs.fields(error.cl)]
        return [
            (_join(path, key), f"unknown key {_SHORT.repr(key)}", _did_you_mean(key, allowed) or _allowed(allowed))
            for key in sorted(error.extra_fields)
        ]
    if isinstance(error, KeyError):
        return [(path, "missing required key", None)]
    if isinstance(error, FieldError):
        return [(_join(path, error.field), error.message, None)]
    if isinstance(error, (ValueError, TypeError)):
        return [(path, str(error) or type(error).__name__, None)]
    owner = getattr(cls, "__qualname__", "the config")
    return [(path, f"{owner} raised {type(error).__name__}: {_SHORT.repr(str(error))}", None)]


def _inner_path(inner: BaseException, path: str) -> str:
    for note in getattr(inner, "__notes__", ()):
        name = getattr(note, "name", None)
        if name is not None:
            return _join(path, name) if isinstance(name, str) else f"{path}[{name}]"
    return path


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _join(path: str, key: Any) -> str:
    """``$.model.d_ff``; keys that are not bare TOML keys are quoted: ``$.model["a b"]``."""
    text = str(key)
    if _BARE_KEY.fullmatch(text):
        return f"{path}.{text}"
    return f"{path}[{json.dumps(text[:60] + ('...' if len(text) > 60 else ''))}]"


def _install_hint(distribution: str) -> str:
    folder = catalogue().get(distribution, {}).get("path")
    source = f", or ./{folder} in a blockspec checkout" if folder else ""
    return f" (pip install {distribution}{source})"


def _did_you_mean(word: str, choices: Any) -> str | None:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


def _allowed(names: list[str]) -> str:
    return "allowed keys: " + ", ".join(names) if names else "this component takes no keys besides use"


def _locate(text: str, path: str) -> int | None:
    """Best-effort line number of ``$.table.key`` in the TOML text."""
    parts = path.removeprefix("$.").split(".")
    header = f"[{parts[0]}]"
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip().startswith(header)), None)
    if start is None or len(parts) == 1:
        return None if start is None else start + 1
    for i in range(start + 1, len(lines)):
        stripped = lines[i].strip()
        if stripped.startswith("["):
            break
        if stripped.split("=", 1)[0].strip() == parts[1]:
            return i + 1
    return start + 1


# ---------------------------------------------------------------- dumping


def spec_to_dict(spec: ModelSpec) -> dict[str, dict[str, Any]]:
    """The plain-dict form of a spec: what tomllib would give for its TOML."""
    document = {"model": _drop_none(_CONVERTER.unstructure(spec.model))}
    for part in spec.components():
        document[part.kind] = {"use": part.use, **_drop_none(_CONVERTER.unstructure(part.config))}
    return document


def dump_spec(spec: ModelSpec) -> str:
    """TOML text that loads back to an equal spec."""
    return toml_text.dumps(spec_to_dict(spec))


def _drop_none(table: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in table.items() if v is not None}
