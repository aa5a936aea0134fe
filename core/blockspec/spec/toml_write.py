"""A small TOML writer for specs: tables of scalars, which is all a spec holds."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def dumps(document: Mapping[str, Mapping[str, Any]]) -> str:
    """Tables in the given order, keys in the given order, one per line."""
    blocks = [_table(name, body) for name, body in document.items()]
    return "\n".join(blocks)


def _table(name: str, body: Mapping[str, Any]) -> str:
    lines = [f"[{_key(name)}]"]
    lines += [f"{_key(key)} = {_value(value)}" for key, value in body.items()]
    return "\n".join(lines) + "\n"


def _key(key: str) -> str:
    bare = key.replace("_", "").replace("-", "").isalnum() and key.isascii()
    return key if bare else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as a TOML spec value")


def _string(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, except that TOML also forbids a raw DEL."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _float(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)
