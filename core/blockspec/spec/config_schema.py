"""One table's JSON Schema, read off its attrs class: the keys, types, defaults, bounds and docs it states.

What the strict converter accepts is the truth; the schema says the same or less, never more: a
check that states no JSON Schema keywords (``validators.JSON_SCHEMA``) leaves its field looser, and
checks that relate fields are left to the reader. So every spec that loads validates.

Field docs follow the docstring convention the configs already use: a line of the class docstring
that starts with a field's key and a colon (``sliding_window: each query attends to ...``, or
``qkv_bias, out_bias: ...`` for several) documents it, up to the next such line or a blank line.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import attrs

from blockspec.spec.strict import CONVERTER
from blockspec.spec.validators import JSON_SCHEMA

_FIELD_LINE = re.compile(r"^(\w+(?:\s*,\s*\w+)*)\s*:\s+(.*)$")  # "name: text" or "a, b: text"
_SIMPLE = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}
_NUMBER_OPERATORS = {">=": "minimum", ">": "exclusiveMinimum", "<=": "maximum", "<": "exclusiveMaximum"}


def _nothing(instance: Any, attribute: Any, value: Any) -> None:
    """A validator that checks nothing: only its wrappers' classes are wanted (attrs does not export them)."""


_OPTIONAL = type(attrs.validators.optional(_nothing))
_AND = type(attrs.validators.and_())
_IN = type(attrs.validators.in_(()))


def config_schema(cls: type) -> dict[str, Any]:
    """An attrs class as a closed JSON object: each field under the key a file writes (its alias)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    docs = field_docs(cls)
    properties = {attribute.alias: field_schema(attribute, hints[attribute.name], docs.get(attribute.alias))
                  for attribute in attrs.fields(cls)}
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    required = [attribute.alias for attribute in attrs.fields(cls) if attribute.default is attrs.NOTHING]
    if required:
        schema["required"] = required
    return schema


def class_doc(cls: type) -> str:
    """The class's docstring, dedented; "" when it has none."""
    return inspect.cleandoc(cls.__doc__) if cls.__doc__ else ""


def field_docs(cls: type) -> dict[str, str]:
    """Key -> its description, from the docstring lines that start with the key and a colon."""
    keys = {attribute.alias for attribute in attrs.fields(cls)}
    docs: dict[str, str] = {}
    current: list[str] = []
    for line in class_doc(cls).splitlines():
        match = _FIELD_LINE.match(line)
        named = [name.strip() for name in match.group(1).split(",")] if match else []
        if named and all(name in keys for name in named):
            current = named
            docs.update(dict.fromkeys(named, match.group(2).strip()))
        elif current and line.strip():
            for name in current:
                docs[name] += " " + line.strip()
        else:
            current = []
    return docs


def field_schema(attribute: attrs.Attribute, hint: Any, doc: str | None = None) -> dict[str, Any]:
    """One field: its type's schema, what its validators state, its default and its doc."""
    schema = merged(type_schema(hint), validator_keywords(attribute.validator))
    default = _json_default(attribute.default)
    if default is not None:
        schema["default"] = default
    if doc:
        schema["description"] = doc
    return schema


def type_schema(hint: Any) -> dict[str, Any]:
    """A type as the strict converter reads it (``strict.py``); {} (anything) for a type it cannot say."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        schema = type_schema(args[0])
        for check in hint.__metadata__:
            schema = merged(schema, dict(getattr(check, JSON_SCHEMA, {})))
        return schema
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        return _union_schema([type_schema(arg) for arg in args])
    if origin in (list, tuple, Sequence) or hint in (list, tuple):
        item = args[0] if args and (origin is not tuple or args[1:] == (Ellipsis,)) else Any
        return {"type": "array", "items": type_schema(item)}
    if origin in (dict, Mapping) or hint is dict:
        return {"type": "object", "additionalProperties": type_schema(args[1] if args else Any)}
    if isinstance(hint, type) and attrs.has(hint):
        return config_schema(hint)
    return {}


def _union_schema(members: list[dict[str, Any]]) -> dict[str, Any]:
    """``int | None`` -> {"type": ["integer", "null"]}; members with more to say -> anyOf."""
    if all(set(member) == {"type"} and isinstance(member["type"], str) for member in members):
        return {"type": [member["type"] for member in members]}
    return {"anyOf": members}


def validator_keywords(validator: Any) -> dict[str, Any]:
    """The JSON Schema keywords an attrs validator states: blockspec's own, a Check, and attrs' ge/gt/le/lt/in_,
    through optional() and lists (and_); a validator that states none gives {}."""
    if validator is None:
        return {}
    stated = getattr(validator, JSON_SCHEMA, None)
    if stated is not None:
        return dict(stated)
    if isinstance(validator, _OPTIONAL):
        return validator_keywords(validator.validator)
    if isinstance(validator, _AND):
        found: dict[str, Any] = {}
        for part in validator._validators:  # attrs keeps a list of validators here
            found = merged(found, validator_keywords(part))
        return found
    operator = getattr(validator, "compare_op", None)
    if operator in _NUMBER_OPERATORS and hasattr(validator, "bound"):
        return {_NUMBER_OPERATORS[operator]: validator.bound}
    if isinstance(validator, _IN):
        return {"enum": list(validator.options)}
    return {}


def merged(schema: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Both schemas at once: one object while they state different keywords (or the same values), else allOf."""
    if all(key not in schema or schema[key] == value for key, value in extra.items()):
        return {**schema, **extra}
    return {"allOf": [schema, extra]}


def _json_default(default: Any) -> Any:
    """A field's default as JSON, or None when it has none, is None (TOML has no null) or cannot be written."""
    if default is attrs.NOTHING or default is None:
        return None
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        if default.takes_self:
            return None
        default = default.factory()
    value = CONVERTER.unstructure(default)
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    return value
