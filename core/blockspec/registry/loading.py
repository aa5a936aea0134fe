"""Plugin discovery: entry points loaded one distribution at a time, failures quarantined.

A distribution lands whole or not at all: its entry points are imported and their hooks run
against a private plugin manager, every registration is checked as it arrives, and only when
all of that succeeded are its components added. Anything else becomes one warning line naming
the distribution, its version and the cause. Nothing here imports torch unless probing.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from importlib import import_module
from importlib.metadata import EntryPoint, entry_points
from itertools import groupby
from types import ModuleType

import pluggy

from blockspec.registry import hookspecs
from blockspec.errors import BlockspecError, PluginError, RegistrationError
from blockspec.registry.policy import Policy, current_policy
from blockspec.spec.problems import close_match
from blockspec.registry.components import Component, Quarantine, Registry, Skipped, validate_component

ENTRY_POINT_GROUP = "blockspec"
STRICT_ENV = "BLOCKSPEC_STRICT_PLUGINS"
HOOK_NAMES = ("blockspec_register",)
# The core's own components and the kit's contract probe are named by module, as an entry point
# names a plugin: the registry layer stays free of torch and of the layers above it.
CORE_PLUGIN = "blockspec.assembly.builtin"
PROBE_MODULE = "blockspec.testing.probe"
MAX_CAUSE = 300  # characters of a plugin's own error message kept in its quarantine line


class _Refused(ValueError):
    """A cause the loader states itself; printed without an exception type."""


class PluginWarning(UserWarning):
    """Base of the warnings the loader emits; the CLI prints each as one line."""


class PluginQuarantinedWarning(PluginWarning):
    """A plugin was skipped; the message names its distribution, its version and the cause."""


class PluginPolicyWarning(PluginWarning):
    """The load policy names a distribution that is not installed."""


def make_plugin_manager() -> pluggy.PluginManager:
    """A fresh manager with blockspec's hookspecs; there is no global one."""
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    return manager


def discover() -> list[EntryPoint]:
    """The installed entry points of the ``blockspec`` group, in a stable order."""
    found = entry_points(group=ENTRY_POINT_GROUP)
    return sorted(found, key=lambda ep: (_dist_name(ep), ep.name))


def load_registry(
    *,
    entry_points: bool = True,
    plugins: Iterable[tuple[ModuleType | object, str, str]] = (),
    strict: bool | None = None,
    policy: Policy | None = None,
    probe: bool | None = None,
) -> Registry:
    """Build a Registry from the built-ins, extra ``(plugin, distribution, version)``, and entry points.

    ``strict`` (default: ``$BLOCKSPEC_STRICT_PLUGINS``) raises PluginError instead of quarantining;
    ``probe`` (default: on in strict mode) builds each component tiny and runs the conformance kit's
    ``contract`` property on it once (no hypothesis needed);
    ``policy`` (default: registry file and ``$BLOCKSPEC_PLUGINS``) selects the distributions to load.
    """
    strict = strict_default() if strict is None else strict
    loader = _Loader(strict=strict, probe=strict if probe is None else probe)
    loader.add_distribution("blockspec", _core_version(), [import_module(CORE_PLUGIN)])
    for plugin, distribution, version in plugins:
        loader.add_distribution(distribution, version, [plugin])
    if entry_points:
        _load_entry_points(loader, policy if policy is not None else current_policy())
    return Registry.of(loader.components, loader.quarantined, loader.skipped, loader.unprobed)


def _load_entry_points(loader: _Loader, policy: Policy) -> None:
    found = discover()
    for line in policy.unknown_names({_dist_name(ep) for ep in found}):
        warnings.warn(line, PluginPolicyWarning, stacklevel=3)
    for distribution, group in groupby(found, key=_dist_name):
        eps = list(group)
        version = eps[0].dist.version if eps[0].dist else "?"
        reason = policy.refuses(distribution)
        if reason:
            loader.skipped.append(Skipped(distribution=distribution, version=version, reason=reason))
            continue
        loader.add_entry_points(distribution, version, eps)


def strict_default() -> bool:
    return os.environ.get(STRICT_ENV, "") not in ("", "0", "false", "no")


def _dist_name(ep: EntryPoint) -> str:
    return ep.dist.name if ep.dist else ep.name


def _core_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("blockspec")
    except PackageNotFoundError:
        return "0+unknown"


class _Loader:
    """Registers one distribution at a time; a distribution lands whole or not at all."""

    def __init__(self, *, strict: bool, probe: bool) -> None:
        self.strict = strict
        self.probe = probe
        self.components: list[Component] = []
        self.quarantined: list[Quarantine] = []
        self.skipped: list[Skipped] = []
        self.unprobed: list[str] = []

    def add_entry_points(self, distribution: str, version: str, eps: list[EntryPoint]) -> None:
        plugins = []
        for ep in eps:
            try:
                plugins.append(ep.load())
            except (Exception, SystemExit) as error:  # a plugin's import must not end the host
                self._quarantine(distribution, version, f"import of {ep.value!r} failed: {describe(error)}")
                return
        self.add_distribution(distribution, version, plugins)

    def add_distribution(self, distribution: str, version: str, plugins: list[object]) -> None:
        try:
            staged: list[Component] = []
            for plugin in plugins:
                staged += _collect(plugin, distribution, version, staged)
            unprobed = _probe_all(staged) if self.probe else []
        except (Exception, SystemExit) as error:  # a plugin's hook must not end the host either
            self._quarantine(distribution, version, describe(error))
            return
        self.components.extend(staged)
        self.unprobed.extend(unprobed)

    def _quarantine(self, distribution: str, version: str, cause: str) -> None:
        entry = Quarantine(distribution=distribution, version=version, cause=cause)
        if self.strict:
            raise PluginError(f"{entry} (strict mode: {STRICT_ENV} is set)")
        self.quarantined.append(entry)
        warnings.warn(str(entry), PluginQuarantinedWarning, stacklevel=4)


def _collect(plugin: object, distribution: str, version: str, earlier: list[Component]) -> list[Component]:
    """Run one plugin's hook against a private manager and return what it registered."""
    _check_api(plugin)
    manager = make_plugin_manager()
    manager.register(plugin, name=distribution)  # validates hook signatures
    manager.check_pending()  # refuses blockspec_* hooks that do not exist
    if not manager.hook.blockspec_register.get_hookimpls():
        raise _Refused(_no_hook(plugin))
    staged: list[Component] = []
    taken = {(c.kind, c.name) for c in earlier}

    def register(kind, name, config_cls, build, *, summary=None, promises=(), serves=None) -> None:
        if isinstance(promises, str):  # promises=("unit_rms") is a string: the comma was forgotten
            raise RegistrationError(f"{kind}:{name}: promises must be a tuple of names, found the string "
                                    f"{promises!r}; write promises=({promises!r},) with the comma")
        component = Component(
            kind=kind, name=name, config_cls=config_cls, build=build,
            distribution=distribution, version=version,
            summary=summary or _first_line(getattr(config_cls, "__doc__", None)),
            promises=frozenset(promises), serves=serves,
        )
        validate_component(component)
        if (kind, name) in taken:
            raise _Refused(f"{kind}:{name} registered twice by {distribution}")
        taken.add((kind, name))
        staged.append(component)

    manager.hook.blockspec_register(register=register)
    return staged


def _no_hook(plugin: object) -> str:
    """Why a plugin has no usable hook: a typo, or a hook without @hookimpl."""
    names = [n for n in dir(plugin) if n.lower().startswith("blockspec")]
    unmarked = [n for n in names if n in HOOK_NAMES]
    if unmarked:
        return f"{unmarked[0]} is not marked with @blockspec.hookimpl"
    close = [n for n in names if close_match(n, HOOK_NAMES, cutoff=0.8)]
    if close:
        return f"implements no blockspec hook: found {close[0]!r}; did you mean {HOOK_NAMES[0]!r}?"
    return f"implements no blockspec hook (expected {', '.join(HOOK_NAMES)})"


def _probe_all(staged: list[Component]) -> list[str]:
    """Probe each staged component with the kit's ``contract`` property; the first breach fails the distribution."""
    checks = import_module(PROBE_MODULE)
    ContractError, probe = checks.ContractError, checks.probe
    unprobed = []
    for component in staged:
        where = f"{component.kind}:{component.name}"
        try:
            reason = probe(component)
        except ContractError as error:
            raise _Refused(f"{where} breaks the {component.kind} contract: {error}") from None
        except (Exception, SystemExit) as error:
            raise _Refused(f"{where} failed its probe: {describe(error)}") from None
        if reason:
            unprobed.append(f"{where} ({component.distribution}): {reason}")
    return unprobed


def _check_api(plugin: object) -> None:
    declared = getattr(plugin, "BLOCKSPEC_API", hookspecs.API_VERSION)
    if declared != hookspecs.API_VERSION:
        raise _Refused(f"declares core API {declared!r}, this blockspec provides API {hookspecs.API_VERSION}")


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0] if (doc or "").strip() else ""


def describe(error: BaseException) -> str:
    """``Type: first line of the message``; one line whatever the plugin raised."""
    try:
        text = str(error)
    except Exception:  # a hostile __str__
        text = ""
    text = "; ".join(line.strip() for line in text.splitlines() if line.strip())  # pluggy spreads causes over lines
    text = text if len(text) <= MAX_CAUSE else text[: MAX_CAUSE - 3] + "..."
    if isinstance(error, (_Refused, BlockspecError)) and text:
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


_describe = describe  # the name before it was public
