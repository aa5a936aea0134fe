"""The [lock] table of a checkpoint's spec.toml: which distribution and version built each component.

Stored in spec.toml itself, after the spec's tables, so the file a user reads says both what
the model is and what made it. The spec parser refuses unknown tables, so readers split
``lock`` off the parsed dict before structuring the rest (``split_lock``).
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from attrs import frozen

from blockspec.errors import CheckpointError
from blockspec.registry.components import Registry

LOCK_TABLE = "lock"


class LockMismatchWarning(UserWarning):
    """A component is installed in another version (or from another distribution) than the lock records."""


@frozen(kw_only=True)
class Locked:
    distribution: str
    version: str


def lock_of(model: Any) -> dict[str, Locked]:
    """"kind:name" -> provider, for every component the model's provenance records."""
    lock = {}
    for component in model.provenance.values():
        key = f"{component.kind}:{component.name}"
        lock[key] = Locked(distribution=component.distribution, version=component.version)
    return dict(sorted(lock.items()))


def lock_toml(lock: dict[str, Locked]) -> str:
    """The [lock] table as TOML text, one inline table per component."""
    lines = [f"[{LOCK_TABLE}]"]
    for key, locked in lock.items():
        fields = f"distribution = {json.dumps(locked.distribution)}, version = {json.dumps(locked.version)}"
        lines.append(f"{json.dumps(key)} = {{ {fields} }}")
    return "\n".join(lines) + "\n"


def split_lock(document: dict[str, Any], file: str) -> tuple[dict[str, Any], dict[str, Locked]]:
    """(the spec tables, the parsed lock) from a parsed spec.toml."""
    spec = {k: v for k, v in document.items() if k != LOCK_TABLE}
    table = document.get(LOCK_TABLE, {})
    if not isinstance(table, dict):
        raise CheckpointError(f"{file}: $.lock: expected a table, found {type(table).__name__}")
    return spec, {key: _locked(file, key, value) for key, value in table.items()}


def _locked(file: str, key: str, value: Any) -> Locked:
    kind, _, name = key.partition(":")
    fields_ok = isinstance(value, dict) and set(value) == {"distribution", "version"}
    if not (kind and name and fields_ok and all(isinstance(v, str) for v in value.values())):
        raise CheckpointError(f"{file}: $.lock.{json.dumps(key)}: expected "
                              '"kind:name" = { distribution = "...", version = "..." }')
    return Locked(distribution=value["distribution"], version=value["version"])


def check_lock(lock: dict[str, Locked], registry: Registry, file: str) -> None:
    """Missing components fail (all named at once); other versions or providers only warn."""
    missing = []
    for key, locked in lock.items():
        kind, _, name = key.partition(":")
        providers = registry.providers(kind, name)
        if not providers:
            missing.append(f"{file}: $.lock.{json.dumps(key)}: {kind} {name!r} is not installed; "
                           f"the checkpoint was saved with {locked.distribution} {locked.version} "
                           f"(pip install '{locked.distribution}=={locked.version}')")
        elif not any(p.distribution == locked.distribution and p.version == locked.version for p in providers):
            found = ", ".join(f"{p.distribution} {p.version}" for p in providers)
            warnings.warn(f"{file}: {key} was saved with {locked.distribution} {locked.version}, "
                          f"installed is {found}; outputs may differ", LockMismatchWarning, stacklevel=3)
    if missing:
        raise CheckpointError("\n".join(missing))
