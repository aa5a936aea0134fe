"""Turning cattrs' exception groups into located problems: $.path, did-you-mean, line numbers."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from typing import Any

import attrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from blockspec.errors import FieldError, Problem
from blockspec.spec.strict import SHORT
from blockspec.spec.validators import FieldErrors


def flatten(error: BaseException, path: str, cls: type | None) -> list[Problem]:
    """cattrs' exception groups -> located problems (path, message, expected, found, hint; no file yet)."""
    if isinstance(error, (ClassValidationError, IterableValidationError)):
        found = []
        for inner in error.exceptions:
            found += flatten(inner, _inner_path(inner, path, getattr(error, "cl", cls)), getattr(error, "cl", cls))
        return found
    if isinstance(error, ForbiddenExtraKeysError):
        allowed = [a.alias for a in attrs.fields(error.cl)]  # the keys a file writes
        return [Problem(path=join(path, key), message=f"unknown key {SHORT.repr(key)}",
                        hint=did_you_mean(key, allowed) or _allowed(allowed))
                for key in sorted(error.extra_fields)]
    if isinstance(error, KeyError):
        return [Problem(path=path, message="missing required key")]
    if isinstance(error, FieldErrors):
        return [attrs.evolve(e.problem, path=join(path, e.field)) for e in error.errors]
    if isinstance(error, FieldError):
        return [attrs.evolve(error.problem, path=join(path, error.field))]
    if isinstance(error, (ValueError, TypeError)):
        return [Problem(path=path, message=str(error) or type(error).__name__)]
    owner = getattr(cls, "__qualname__", "the config")
    return [Problem(path=path, message=f"{owner} raised {type(error).__name__}: {SHORT.repr(str(error))}")]


def _inner_path(inner: BaseException, path: str, cls: type | None = None) -> str:
    """The attribute (``.name``, as a file writes it: its alias), mapping key or list index (``.index``) a cattrs
    note names."""
    aliases = {a.name: a.alias for a in attrs.fields(cls)} if cls is not None and attrs.has(cls) else {}
    for note in getattr(inner, "__notes__", ()):
        name = getattr(note, "name", getattr(note, "index", None))
        if isinstance(name, str):
            name = aliases.get(name, name)
        if name is not None:
            return join(path, name) if isinstance(name, str) else f"{path}[{name}]"
    return path


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def join(path: str, key: Any) -> str:
    """``$.model.d_ff``; keys that are not bare TOML keys are quoted: ``$.model["a b"]``."""
    text = str(key)
    if _BARE_KEY.fullmatch(text):
        return f"{path}.{text}"
    return f"{path}[{json.dumps(text[:60] + ('...' if len(text) > 60 else ''))}]"


def close_match(word: str, choices: Iterable[str], *, cutoff: float = 0.6) -> str | None:
    """The choice ``word`` was most likely meant to be (a typo's correction), or None: the one
    fuzzy match every "did you mean" of the library makes."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return close[0] if close else None


def did_you_mean(word: str, choices: Iterable[str], *, cutoff: float = 0.6) -> str | None:
    """``did you mean 'x'?`` for the closest choice, or None."""
    close = close_match(word, choices, cutoff=cutoff)
    return None if close is None else f"did you mean {close!r}?"


def _allowed(names: list[str]) -> str:
    return "allowed keys: " + ", ".join(names) if names else "this component takes no keys besides use"


_ARRAY_ENTRY = re.compile(r"([A-Za-z0-9_-]+)\[(\d+)\]")


def _locate_entry(lines: list[str], name: str, k: int, keys: list[str]) -> int | None:
    """The line of ``$.name[k].key...`` in an array of tables: the k-th [[name]], then the key inside it."""
    starts = [i for i, ln in enumerate(lines) if ln.strip().replace(" ", "").startswith(f"[[{name}]]")]
    if k >= len(starts):
        return None
    end = next((s for s in starts if s > starts[k]), len(lines))
    best = starts[k]
    for depth, key in enumerate(keys[:2]):
        for i in range(best + 1, end):
            stripped = lines[i].strip()
            if stripped.split("=", 1)[0].strip() == key or (
                    depth == 0 and stripped.replace(" ", "") == f"[{name}.{key}]"):
                best = i
                break
        else:
            break
    return best + 1


def locate(text: str, path: str) -> int | None:
    """Best-effort line number of ``$.table.key`` in the TOML text."""
    parts = path.removeprefix("$.").split(".")
    lines = text.splitlines()
    entry = _ARRAY_ENTRY.fullmatch(parts[0])
    if entry:
        return _locate_entry(lines, entry[1], int(entry[2]), parts[1:])
    header = f"[{parts[0]}]"
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
