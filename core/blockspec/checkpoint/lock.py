"""The [lock] table of a checkpoint's spec.toml: which distribution and version built each component.

Stored in spec.toml itself, after the spec's tables, so the file a user reads says both what
the model is and what made it. The spec parser refuses unknown tables, so readers split
``lock`` off the parsed dict before structuring the rest (``split_lock``).
"""

from __future__ import annotations

import warnings
from typing import Annotated, Any

import tomli_w
from attrs import field, frozen

from blockspec.errors import CheckpointError, Problem
from blockspec.registry.components import Registry
from blockspec.registry.policy import normalize
from blockspec.spec.documents import structure_document
from blockspec.spec.problems import join
from blockspec.spec.strict import CONVERTER
from blockspec.spec.validators import Check

LOCK_TABLE = "lock"
# Components that moved from one first-party distribution to another: "kind:name" -> (was, is now).
# A lock written before the move names the old provider of the same component.
MOVED = {"block:pre": ("blockspec-blocks", "blockspec"), "block:post": ("blockspec-blocks", "blockspec")}


class LockMismatchWarning(UserWarning):
    """A component is installed in another version (or from another distribution) than the lock records."""


@frozen(kw_only=True)
class Locked:
    distribution: str
    version: str


LockKey = Annotated[str, Check(lambda key: all(key.partition(":")[::2]), 'a "kind:name" key')]


@frozen(kw_only=True)
class LockDocument:
    """The [lock] table alone; spec.toml's other tables are the spec's."""

    lock: dict[LockKey, Locked] = field(factory=dict)


def lock_of(model: Any) -> dict[str, Locked]:
    """"kind:name" -> provider, for every component the model's provenance records, and every adapter it applied."""
    lock = {}
    for component in [*model.provenance.values(), *getattr(model, "adapted", {}).values()]:
        key = f"{component.kind}:{component.name}"
        lock[key] = Locked(distribution=component.distribution, version=component.version)
    return dict(sorted(lock.items()))


def lock_toml(lock: dict[str, Locked]) -> str:
    """The [lock] table as TOML text, one sub-table per component."""
    return tomli_w.dumps(CONVERTER.unstructure(LockDocument(lock=lock)))


def split_lock(document: dict[str, Any], file: str) -> tuple[dict[str, Any], dict[str, Locked]]:
    """(the spec tables, the parsed lock) from a parsed spec.toml."""
    spec = {k: v for k, v in document.items() if k != LOCK_TABLE}
    table = {LOCK_TABLE: document[LOCK_TABLE]} if LOCK_TABLE in document else {}
    lock = structure_document(table, LockDocument, file=file, error=CheckpointError).lock
    return spec, {key: _moved(key, locked) for key, locked in lock.items()}


def _moved(key: str, locked: Locked) -> Locked:
    """An old lock's entry for a component that has moved since, naming its new provider (version as recorded)."""
    was, now = MOVED.get(key, (None, None))
    if now is None or normalize(locked.distribution) != normalize(was):
        return locked
    return Locked(distribution=now, version=locked.version)


def preferences(lock: dict[str, Locked]) -> dict[str, str]:
    """"kind:name" -> the distribution that built it: the tie-break for names two distributions provide."""
    return {key: locked.distribution for key, locked in lock.items()}


def check_lock(lock: dict[str, Locked], registry: Registry, file: str) -> None:
    """Missing components fail (all named at once); other versions or providers only warn.

    A name that several distributions provide is settled by the lock, so the locked one must be
    among them: were it missing, which of the others to use would be a guess.
    """
    missing = []
    for key, locked in lock.items():
        kind, _, name = key.partition(":")
        providers = registry.providers(kind, name)
        install = f"(pip install '{locked.distribution}=={locked.version}')"
        if not providers:
            missing.append(Problem(file=file, path=join("$.lock", key), message=f"{kind} {name!r} is not installed",
                                   hint=f"the checkpoint was saved with {locked.distribution} {locked.version} "
                                        f"{install}"))
        elif len(providers) > 1 and not any(normalize(p.distribution) == normalize(locked.distribution)
                                            for p in providers):
            found = " and ".join(p.distribution for p in providers)
            missing.append(Problem(file=file, path=join("$.lock", key),
                                   message=f"{kind} {name!r} is provided by {found}, but the checkpoint was saved "
                                           f"with {locked.distribution} {locked.version}, which is not installed "
                                           f"{install}"))
        elif not any(p.distribution == locked.distribution and p.version == locked.version for p in providers):
            found = ", ".join(f"{p.distribution} {p.version}" for p in providers)
            warnings.warn(f"{file}: {key} was saved with {locked.distribution} {locked.version}, "
                          f"installed is {found}; outputs may differ", LockMismatchWarning, stacklevel=3)
    if missing:
        raise CheckpointError(missing)
