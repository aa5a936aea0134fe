"""Registry files (registry.toml): the catalogue of who provides what, and the load policy.

The shipped registry.toml lists the first-party plugins. A user's own file (``--registry FILE``
or ``BLOCKSPEC_REGISTRY``) replaces its ``[policy]`` and adds to its ``[distributions]``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Literal

from attrs import field, frozen

from blockspec.errors import Problem, SpecError
from blockspec.spec import toml_read as toml_guard
from blockspec.spec.documents import structure_document
from blockspec.spec.validators import Check

CATALOGUE_NAME = "registry.toml"
REGISTRY_ENV = "BLOCKSPEC_REGISTRY"
_FILE_OVERRIDE: ContextVar[str | None] = ContextVar("blockspec_registry_file", default=None)

DistributionName = Annotated[str, Check(bool, "a distribution name")]
KindName = Annotated[str, Check(lambda text: ":" in text, 'a "kind:name" string')]


@frozen(kw_only=True)
class PolicyTable:
    """A registry file's [policy]: which installed plugin distributions are loaded."""

    load: Literal["all", "allowed"] = "all"
    allow: tuple[DistributionName, ...] = ()
    deny: tuple[DistributionName, ...] = ()


@frozen(kw_only=True)
class Distribution:
    """One [distributions.NAME] entry: where it lives in a checkout, and what it registers."""

    path: str | None = None
    summary: str | None = None
    provides: tuple[KindName, ...] = ()


@frozen(kw_only=True)
class RegistryDocument:
    """A registry file as written: both tables are optional."""

    policy: PolicyTable = field(factory=PolicyTable)
    distributions: dict[str, Distribution] = field(factory=dict)


@frozen(kw_only=True)
class RegistryFile:
    """One validated registry file: its [policy] and its [distributions] entries."""

    source: str
    policy: PolicyTable = field(factory=PolicyTable)
    distributions: dict[str, Distribution] = field(factory=dict)


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
    document = structure_document(data, RegistryDocument, file=source, text=text)
    return RegistryFile(source=source, policy=document.policy, distributions=document.distributions)


def catalogue() -> dict[str, Distribution]:
    """distribution name -> its catalogue entry (path, summary, provides): shipped, then the user's."""
    shipped = shipped_registry_file()
    chosen = policy_file()
    return shipped.distributions if chosen is shipped else {**shipped.distributions, **chosen.distributions}


def provider_of(kind: str, name: str) -> str | None:
    """The distribution the catalogue says provides ``kind:name``, if any."""
    wanted = f"{kind}:{name}"
    for distribution, entry in catalogue().items():
        if wanted in entry.provides:
            return distribution
    return None


def install_hint(distribution: str) -> str:
    """`` (pip install X, or ./plugins/x in a blockspec checkout)``: how to get a distribution."""
    entry = catalogue().get(distribution)
    folder = entry.path if entry is not None else None
    source = f", or ./{folder} in a blockspec checkout" if folder else ""
    return f" (pip install {distribution}{source})"
