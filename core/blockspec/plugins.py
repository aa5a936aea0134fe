"""Plugin discovery: entry points loaded one by one, failures quarantined.

Nothing here imports torch: discovery must stay cheap (``blockspec list``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType

import pluggy

from . import hookspecs
from .errors import PluginError
from .registry import Component, Quarantine, Registry, validate_component

ENTRY_POINT_GROUP = "blockspec"
STRICT_ENV = "BLOCKSPEC_STRICT_PLUGINS"


class PluginQuarantinedWarning(UserWarning):
    """A plugin was skipped; the message names its distribution and the cause."""


def make_plugin_manager() -> pluggy.PluginManager:
    """A fresh manager with blockspec's hookspecs; there is no global one."""
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    return manager


def discover() -> list[EntryPoint]:
    """The installed entry points of the ``blockspec`` group, in a stable order."""
    found = entry_points(group=ENTRY_POINT_GROUP)
    return sorted(found, key=lambda ep: (ep.dist.name if ep.dist else "", ep.name))


def load_registry(
    *,
    entry_points: bool = True,
    plugins: Iterable[tuple[ModuleType | object, str, str]] = (),
    strict: bool | None = None,
) -> Registry:
    """Build a Registry from the built-ins, extra ``(plugin, distribution, version)``, and entry points."""
    from . import builtin

    loader = _Loader(strict=_strict_default() if strict is None else strict)
    loader.add(builtin, "blockspec", _core_version())
    for plugin, distribution, version in plugins:
        loader.add(plugin, distribution, version)
    if entry_points:
        for ep in discover():
            loader.add_entry_point(ep)
    return Registry.of(loader.components, loader.quarantined)


def _strict_default() -> bool:
    return os.environ.get(STRICT_ENV, "") not in ("", "0", "false", "no")


def _core_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("blockspec")
    except PackageNotFoundError:
        return "0+unknown"


class _Loader:
    """Registers one plugin at a time; a plugin lands whole or not at all."""

    def __init__(self, *, strict: bool) -> None:
        self.strict = strict
        self.components: list[Component] = []
        self.quarantined: list[Quarantine] = []

    def add_entry_point(self, ep: EntryPoint) -> None:
        distribution = ep.dist.name if ep.dist else ep.name
        version = ep.dist.version if ep.dist else "?"
        try:
            plugin = ep.load()
        except (Exception, SystemExit) as error:  # a plugin's import must not end the host
            self._quarantine(distribution, version, f"import of {ep.value!r} failed: {_describe(error)}")
            return
        self.add(plugin, distribution, version)

    def add(self, plugin: object, distribution: str, version: str) -> None:
        try:
            staged = _collect(plugin, distribution, version, self._taken())
        except (Exception, SystemExit) as error:
            self._quarantine(distribution, version, _describe(error))
            return
        self.components.extend(staged)

    def _taken(self) -> set[tuple[str, str, str]]:
        return {(c.kind, c.name, c.distribution) for c in self.components}

    def _quarantine(self, distribution: str, version: str, cause: str) -> None:
        entry = Quarantine(distribution=distribution, version=version, cause=cause)
        if self.strict:
            raise PluginError(str(entry))
        self.quarantined.append(entry)
        warnings.warn(str(entry), PluginQuarantinedWarning, stacklevel=4)


def _collect(plugin: object, distribution: str, version: str, taken: set) -> list[Component]:
    """Run one plugin's hook against a private manager and return what it registered."""
    _check_api(plugin)
    manager = make_plugin_manager()
    manager.register(plugin, name=distribution)  # validates hook signatures
    manager.check_pending()  # refuses blockspec_* hooks that do not exist
    staged: list[Component] = []

    def register(kind, name, config_cls, build, *, summary=None, promises=()) -> None:
        component = Component(
            kind=kind, name=name, config_cls=config_cls, build=build,
            distribution=distribution, version=version,
            summary=summary or _first_line(config_cls.__doc__),
            promises=frozenset(promises),
        )
        validate_component(component)
        key = (kind, name, distribution)
        if key in taken or any((c.kind, c.name) == (kind, name) for c in staged):
            raise ValueError(f"{kind}:{name} registered twice by {distribution}")
        staged.append(component)

    manager.hook.blockspec_register(register=register)
    return staged


def _check_api(plugin: object) -> None:
    declared = getattr(plugin, "BLOCKSPEC_API", hookspecs.API_VERSION)
    if declared != hookspecs.API_VERSION:
        raise ValueError(
            f"declares core API {declared!r}, this blockspec provides API {hookspecs.API_VERSION}"
        )


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0] if (doc or "").strip() else ""


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
