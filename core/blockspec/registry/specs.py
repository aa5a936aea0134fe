"""Reading specs against the installed components: the registry's half of the converter.

The spec layer validates tables and fields; this module answers its one question, which
component a ``use`` names, and says what to install when the answer is none.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from blockspec.registry.catalogue import install_hint, provider_of
from blockspec.registry.components import Component, Registry
from blockspec.registry.policy import normalize
from blockspec.spec import toml_read
from blockspec.errors import Problem, SpecError
from blockspec.spec.convert import ADAPTERS, LAYERS, Unresolved, read_spec, read_spec_text, spec_to_dict
from blockspec.spec.kinds import SECTIONS
from blockspec.spec.schema import LAYER_KINDS, ModelSpec


def load_spec(path: str | Path, registry: Registry | None = None) -> ModelSpec:
    """Read, parse and validate a TOML spec file; every problem is reported at once."""
    return loads_spec(read_spec_text(path), registry, file=str(path))


def loads_spec(text: str, registry: Registry | None = None, *, file: str | None = None) -> ModelSpec:
    """Parse and validate TOML text; ``file`` names it in messages."""
    data = toml_read.parse(text, file)
    return structure_spec(data, registry, file=file, text=text)


def load_adapters(path: str | Path, spec: ModelSpec, registry: Registry | None = None) -> ModelSpec:
    """``spec`` with the [[adapters]] of the TOML file at ``path`` (a file of [[adapters]] tables and nothing
    else), read as strictly as a spec's own and located in that file. ``spec`` must have none yet."""
    text = read_spec_text(path)
    data = toml_read.parse(text, str(path))
    extra = sorted(key for key in data if key != ADAPTERS)
    if extra or ADAPTERS not in data:
        found = f"[{extra[0]}]" if extra else "no [[adapters]] table"
        raise SpecError(Problem(file=str(path), path=f"$.{extra[0]}" if extra else "$",
                                expected="[[adapters]] tables only (the model they adapt is the checkpoint's)",
                                found=found))
    if spec.adapters:
        raise SpecError(Problem(file=str(path), path=f"$.{ADAPTERS}", message=f"the model has [[adapters]] already "
                                f"({len(spec.adapters)} in its spec)", hint="merge them into the base first "
                                "(`blockspec merge`), or train the adapted checkpoint without this file"))
    read = structure_spec({**spec_to_dict(spec), ADAPTERS: data[ADAPTERS]}, registry, file=str(path), text=text)
    return attrs.evolve(spec, adapters=read.adapters)


def structure_spec(
    data: dict[str, Any],
    registry: Registry | None = None,
    *,
    file: str | None = None,
    text: str | None = None,
    prefer: Mapping[str, str] | None = None,
) -> ModelSpec:
    """A plain dict (as tomllib gives it) -> a validated ModelSpec, or SpecError listing every problem.

    ``prefer`` maps "kind:name" to a distribution and only breaks ties: an unpinned ``use``
    that two installed distributions provide, in a model-wide table or a [[layers]] entry, is
    read as pinned to the preferred one (a checkpoint's [lock] says which distribution built
    each component), so the spec, and what it builds and saves, names that one.
    """
    if registry is None:
        from blockspec.registry.loading import load_registry

        registry = load_registry()
    if prefer:
        data = pinned_where_ambiguous(data, registry, prefer)
    return read_spec(data, RegistryResolver(registry), file=file, text=text)


def pinned_where_ambiguous(data: dict[str, Any], registry: Registry, prefer: Mapping[str, str]) -> dict[str, Any]:
    """The spec document with each unpinned ``use`` that several distributions provide pinned as ``prefer`` says."""
    if not isinstance(data, dict):
        return data  # the reader reports it
    pinned = {key: _pinned(key, table, registry, prefer) if key in SECTIONS else table for key, table in data.items()}
    entries = data.get(LAYERS)
    if isinstance(entries, list):
        pinned[LAYERS] = [{kind: _pinned(kind, table, registry, prefer) if kind in LAYER_KINDS else table
                           for kind, table in entry.items()} if isinstance(entry, dict) else entry
                          for entry in entries]
    adapters = data.get(ADAPTERS)
    if isinstance(adapters, list):
        pinned[ADAPTERS] = [_pinned("adapter", entry, registry, prefer) for entry in adapters]
    return pinned


def _pinned(kind: str, table: Any, registry: Registry, prefer: Mapping[str, str]) -> Any:
    use = table.get("use") if isinstance(table, dict) else None
    preferred = prefer.get(f"{kind}:{use}") if isinstance(use, str) and ":" not in use else None
    providers = registry.providers(kind, use) if preferred is not None else ()
    if len(providers) < 2:
        return table  # pinned already, unambiguous, or not settled by a preference
    wanted = normalize(preferred)
    distribution = next((c.distribution for c in providers if normalize(c.distribution) == wanted), preferred)
    return {**table, "use": f"{distribution}:{use}"}


def ambiguity_warnings(registry: Registry) -> list[str]:
    """One line per name that several distributions provide: specs must pin which one they mean."""
    return [f"{kind} {name!r} is provided by {' and '.join(providers)}; a spec's unpinned use = {name!r} is "
            f'ambiguous (pin one, e.g. use = "{providers[0]}:{name}"; checkpoints follow their [lock])'
            for kind, name, providers in registry.ambiguous()]


class RegistryResolver:
    """Answers the spec reader's ``use`` questions from a registry and the catalogue."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def names(self, kind: str) -> list[str]:
        return self.registry.names(kind)

    def resolve(self, kind: str, use: str) -> Component | Unresolved:
        distribution, _, name = use.rpartition(":")
        providers = self.registry.providers(kind, name)
        if distribution:
            providers = tuple(c for c in providers if c.distribution == distribution)
        if len(providers) == 1:
            return providers[0]
        if len(providers) > 1:
            both = " and ".join(c.distribution for c in providers)
            return Unresolved(message=f"{kind} {name!r} is provided by {both}",
                              hint=f'pin one, e.g. use = "{providers[0].qualified_name}"')
        return self._unknown(kind, name, distribution or None)

    def _unknown(self, kind: str, name: str, distribution: str | None) -> Unresolved:
        provider = provider_of(kind, name)
        if self.registry.providers(kind, name) and distribution:
            others = ", ".join(c.distribution for c in self.registry.providers(kind, name))
            return Unresolved(message=f"{kind} {name!r} is not provided by {distribution!r}",
                              hint=f"it is provided by {others}", unknown=True)
        skipped = self._skipped(provider) if provider else None
        if skipped:
            return Unresolved(message=f"{kind} {name!r} is not loaded: {provider} {skipped.reason}",
                              hint="select it with BLOCKSPEC_PLUGINS or the registry file's [policy]", unknown=True)
        if provider:
            cause = self._quarantine_cause(provider)
            message = f"{kind} {name!r} is not installed" + (f" ({cause})" if cause else "")
            return Unresolved(message=message, hint=f"install the distribution {provider}{install_hint(provider)}",
                              unknown=True)
        return Unresolved(message=f"unknown {kind} {name!r}", hint=self._suggestion(kind, name), unknown=True)

    def _suggestion(self, kind: str, name: str) -> str | None:
        suggestion = self.registry.suggest(kind, name)
        if suggestion:
            source = self.registry.providers(kind, suggestion)[0].distribution
            return f"did you mean {suggestion!r}? (provided by {source})"
        if self.registry.names(kind):
            return "installed: " + ", ".join(self.registry.names(kind))
        return None

    def _skipped(self, distribution: str) -> Any:
        wanted = normalize(distribution)
        return next((s for s in self.registry.skipped if normalize(s.distribution) == wanted), None)

    def _quarantine_cause(self, distribution: str) -> str | None:
        for entry in self.registry.quarantined:
            if normalize(entry.distribution) == normalize(distribution):
                return f"{distribution} was quarantined: {entry.cause}"
        return None
