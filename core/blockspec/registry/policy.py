"""The load policy: which installed plugin distributions are loaded.

Sources, strongest first: ``BLOCKSPEC_PLUGINS`` (the distributions to load; empty = none) replaces
the file's selection; the file is ``--registry FILE``, else ``BLOCKSPEC_REGISTRY``, else the shipped
``registry.toml``. A file's ``deny`` always wins. The core's built-ins are not a plugin: always loaded.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from typing import Literal

from attrs import frozen

from blockspec.spec.problems import close_match
from blockspec.registry.catalogue import REGISTRY_ENV, policy_file, registry_file_override

PLUGINS_ENV = "BLOCKSPEC_PLUGINS"
__all__ = ["PLUGINS_ENV", "REGISTRY_ENV", "Policy", "current_policy", "normalize", "registry_file_override"]


def normalize(distribution: str) -> str:
    """PEP 503 form, so ``blockspec_norms`` and ``Blockspec-Norms`` name the same distribution."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


@frozen(kw_only=True)
class Policy:
    """What to load; ``source`` says where each part came from, for ``blockspec doctor``."""

    load: Literal["all", "allowed"] = "all"
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    selected: tuple[str, ...] | None = None  # from BLOCKSPEC_PLUGINS; None when unset
    source: str = "defaults"

    def refuses(self, distribution: str) -> str | None:
        """Why ``distribution`` is not loaded, or None when it is."""
        name = normalize(distribution)
        if name in {normalize(d) for d in self.deny}:
            return f"denied by {self.source}"
        if self.selected is not None:
            return None if name in {normalize(d) for d in self.selected} else f"not in {PLUGINS_ENV}"
        if self.load == "allowed" and name not in {normalize(d) for d in self.allow}:
            return f"not allowed by {self.source} (load = \"allowed\")"
        return None

    def unknown_names(self, installed: Iterable[str]) -> Iterator[str]:
        """One line per name the policy lists that no installed distribution has (a typo, usually)."""
        present = {normalize(d): d for d in installed}
        lists = {PLUGINS_ENV: self.selected or (), "allow": self.allow, "deny": self.deny}
        for where, names in lists.items():
            for name in names:
                if normalize(name) not in present:
                    yield f"{where} names {name!r}, which is not installed" + _close(name, present)

    def describe(self) -> str:
        parts = [f"load = {self.load!r}"]
        if self.allow:
            parts.append("allow = " + ", ".join(self.allow))
        if self.deny:
            parts.append("deny = " + ", ".join(self.deny))
        if self.selected is not None:
            parts.append(f"{PLUGINS_ENV} = " + (",".join(self.selected) or "(empty: none)"))
        return f"{'; '.join(parts)}  (from {self.source})"


def _close(name: str, present: dict[str, str]) -> str:
    close = close_match(normalize(name), present)
    return f"; did you mean {present[close]!r}?" if close else ""


def current_policy() -> Policy:
    """The policy in force for this process: the registry file, then BLOCKSPEC_PLUGINS."""
    registry_file = policy_file()
    table = registry_file.policy
    policy = Policy(load=table.load, allow=table.allow, deny=table.deny, source=registry_file.source)
    selected = os.environ.get(PLUGINS_ENV)
    if selected is None:
        return policy
    names = tuple(n.strip() for n in selected.split(",") if n.strip())
    return Policy(load=policy.load, allow=policy.allow, deny=policy.deny, selected=names,
                  source=f"{policy.source} and {PLUGINS_ENV}")
