"""Registry files (registry.toml): the catalogue of who provides what, and the load policy.

The shipped registry.toml lists the first-party plugins. A user's own file (``--registry FILE``
or ``BLOCKSPEC_REGISTRY``) replaces its ``[policy]`` and adds to its ``[distributions]``.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from attrs import field, frozen

from blockspec.spec import toml_read as toml_guard
from blockspec.errors import Problem, SpecError

CATALOGUE_NAME = "registry.toml"
REGISTRY_ENV = "BLOCKSPEC_REGISTRY"
POLICY_LOADS = ("all", "allowed")
_POLICY_KEYS = ("load", "allow", "deny")
_ENTRY_KEYS = ("path", "summary", "provides")
_FILE_OVERRIDE: ContextVar[str | None] = ContextVar("blockspec_registry_file", default=None)


@frozen(kw_only=True)
class RegistryFile:
    """One validated registry file: its [policy] keys and its [distributions] entries."""

    source: str
    policy: dict[str, Any] = field(factory=dict)
    distributions: dict[str, dict[str, Any]] = field(factory=dict)


def _shipped_text() -> str | None:
    shipped = files("blockspec") / CATALOGUE_NAME  # inside a built wheel
    if shipped.is_file():
        return shipped.read_text(encoding="utf-8")
    checkout = Path(__file__).resolve().parents[3] / CATALOGUE_NAME  # editable install
    return checkout.read_text(encoding="utf-8") if checkout.is_file() else None


@cache
def shipped_registry_file() -> RegistryFile:
    text = _shipped_text()
    source = f"{CATALOGUE_NAME} (shipped)"
    return parse_registry_file(text, source) if text else RegistryFile(source=source)


def read_registry_file(path: Path) -> RegistryFile:
    """A user's registry file, validated; any problem is a SpecError naming the file and $.path."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise SpecError(Problem(file=str(path), message=f"cannot read registry file: {reason}")) from None
    return parse_registry_file(text, str(path))


def policy_file() -> RegistryFile:
    """``--registry FILE``, else ``$BLOCKSPEC_REGISTRY``, else the shipped registry.toml."""
    chosen = _FILE_OVERRIDE.get() or os.environ.get(REGISTRY_ENV) or None
    return read_registry_file(Path(chosen)) if chosen else shipped_registry_file()


@contextmanager
def registry_file_override(path: str | None) -> Iterator[None]:
    """Within the block, the registry file is ``path`` (the CLI's ``--registry``)."""
    token = _FILE_OVERRIDE.set(path)
    try:
        yield
    finally:
        _FILE_OVERRIDE.reset(token)


def parse_registry_file(text: str, source: str) -> RegistryFile:
    data = toml_guard.parse(text, source)
    problems = _FileChecker(source)
    policy, distributions = problems.check(data)
    if problems.found:
        raise SpecError(problems.found)
    return RegistryFile(source=source, policy=policy, distributions=distributions)


class _FileChecker:
    """Collects every problem of a registry file, each with its $.path."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.found: list[Problem] = []

    def problem(self, path: str, message: str, hint: str | None = None) -> None:
        self.found.append(Problem(file=self.source, path=path, message=message, hint=hint))

    def check(self, data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        self._unknown_keys(data, ("policy", "distributions"), "$")
        policy = self._table(data, "policy", "$.policy")
        distributions = self._table(data, "distributions", "$.distributions")
        self._policy(policy)
        for name, entry in distributions.items():
            self._entry(entry, f"$.distributions.{name}")
        return ({k: tuple(v) if isinstance(v, list) else v for k, v in policy.items()},
                {k: v for k, v in distributions.items() if isinstance(v, dict)})

    def _table(self, data: dict[str, Any], key: str, path: str) -> dict[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            self.problem(path, f"expected a table [{key}], found {type(value).__name__}")
            return {}
        return value

    def _unknown_keys(self, table: dict[str, Any], allowed: tuple[str, ...], path: str) -> None:
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]!r}?" if close else "allowed: " + ", ".join(allowed)
                self.problem(f"{path}.{key}", f"unknown key {key!r}", hint)

    def _policy(self, policy: dict[str, Any]) -> None:
        self._unknown_keys(policy, _POLICY_KEYS, "$.policy")
        load = policy.get("load", "all")
        if load not in POLICY_LOADS:
            self.problem("$.policy.load", f"expected one of {', '.join(map(repr, POLICY_LOADS))}, found {load!r}")
        for key in ("allow", "deny"):
            self._names(policy.get(key, []), f"$.policy.{key}")

    def _names(self, value: Any, path: str) -> None:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.problem(path, f"expected a list of distribution names, found {value!r}")

    def _entry(self, entry: Any, path: str) -> None:
        if not isinstance(entry, dict):
            self.problem(path, f"expected a table, found {type(entry).__name__}")
            return
        self._unknown_keys(entry, _ENTRY_KEYS, path)
        provides = entry.get("provides", [])
        if not isinstance(provides, list) or not all(isinstance(p, str) and ":" in p for p in provides):
            self.problem(f"{path}.provides", f'expected a list of "kind:name" strings, found {provides!r}')


def catalogue() -> dict[str, dict]:
    """distribution name -> its catalogue entry (path, summary, provides): shipped, then the user's."""
    shipped = shipped_registry_file()
    chosen = policy_file()
    return shipped.distributions if chosen is shipped else {**shipped.distributions, **chosen.distributions}


def provider_of(kind: str, name: str) -> str | None:
    """The distribution the catalogue says provides ``kind:name``, if any."""
    wanted = f"{kind}:{name}"
    for distribution, entry in catalogue().items():
        if wanted in entry.get("provides", ()):
            return distribution
    return None


def install_hint(distribution: str) -> str:
    """`` (pip install X, or ./plugins/x in a blockspec checkout)``: how to get a distribution."""
    folder = catalogue().get(distribution, {}).get("path")
    source = f", or ./{folder} in a blockspec checkout" if folder else ""
    return f" (pip install {distribution}{source})"
