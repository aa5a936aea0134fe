"""Registry: kind -> name -> the components that provide it, with provenance."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import attrs
from attrs import field, frozen

from blockspec.errors import RegistrationError
from blockspec.spec.kinds import KINDS, PROMISED_FIELDS, PROMISES, REQUIRES
from blockspec.spec.problems import close_match
from blockspec.spec.schema import ModelConfig

Serves = Callable[[ModelConfig], bool]
"""``serves(model) -> bool``: whether a component's build serves these [model] sizes (``n_heads`` even, ...).

Its docstring's first line (else its name) is the text messages quote: write it as a ``def`` with one.
"""


@frozen(kw_only=True)
class Component:
    """One registered component: how to configure it, how to build it, who made it."""

    kind: str
    name: str
    config_cls: type
    build: Callable[..., Any]
    distribution: str
    version: str
    summary: str = ""
    promises: frozenset[str] = frozenset()
    serves: Serves | None = None  # the [model] sizes its build serves; None: every size

    @property
    def qualified_name(self) -> str:
        return f"{self.distribution}:{self.name}"

    def serves_model(self, model: ModelConfig) -> bool:
        """Whether the build serves ``model``'s sizes, as its ``serves`` constraint says (no constraint: yes)."""
        return self.serves is None or bool(self.serves(model))

    @property
    def constraint(self) -> str:
        """The size constraint in words: its docstring's first line, else its name; "" without one."""
        if self.serves is None:
            return ""
        doc = (inspect.getdoc(self.serves) or "").strip()
        return doc.splitlines()[0] if doc else getattr(self.serves, "__name__", repr(self.serves))


@frozen(kw_only=True)
class Quarantine:
    """A plugin that was not loaded, and why."""

    distribution: str
    version: str
    cause: str

    def __str__(self) -> str:
        return f"plugin {self.distribution} {self.version} quarantined: {self.cause}"


@frozen(kw_only=True)
class Skipped:
    """An installed plugin distribution the load policy left out (never imported)."""

    distribution: str
    version: str
    reason: str

    def __str__(self) -> str:
        return f"plugin {self.distribution} {self.version} not loaded: {self.reason}"


def validate_component(component: Component) -> None:
    """Check a registration before it enters the registry (llm-style callback check)."""
    if component.kind not in KINDS:
        raise RegistrationError(
            f"unknown kind {component.kind!r} for {component.name!r}; expected one of {', '.join(KINDS)}"
        )
    if not component.name or not component.name.replace("_", "").replace("-", "").isalnum():
        raise RegistrationError(f"component name must be a plain identifier, found {component.name!r}")
    cls = component.config_cls
    if not (isinstance(cls, type) and attrs.has(cls) and _is_frozen(cls)):
        raise RegistrationError(
            f"{component.kind}:{component.name}: config_cls must be a frozen attrs class, found {cls!r}"
        )
    if not callable(component.build):
        raise RegistrationError(f"{component.kind}:{component.name}: build must be callable")
    _check_promises(component)
    _check_serves(component)


def _check_promises(component: Component) -> None:
    """Only the kind's promises, and each with the promises it builds on (norm_preserving needs rotary)."""
    unknown = component.promises - PROMISES[component.kind]
    if unknown:
        raise RegistrationError(
            f"{component.kind}:{component.name}: unknown promises {sorted(unknown)}; "
            f"a {component.kind} may promise {sorted(PROMISES[component.kind])}"
        )
    for promise in sorted(component.promises):
        needed = REQUIRES.get((component.kind, promise))
        if needed is not None and needed not in component.promises:
            raise RegistrationError(
                f"{component.kind}:{component.name}: promise {promise!r} needs {needed!r} as well; "
                f"write promises=({needed!r}, {promise!r}, ...)"
            )
        _check_promised_fields(component, promise)


def _check_promised_fields(component: Component, promise: str) -> None:
    """A promise about an option reads it from the config fields it names: the config class must have them."""
    fields = attrs.fields_dict(component.config_cls)
    for name in PROMISED_FIELDS.get((component.kind, promise), ()):
        if name not in fields:
            raise RegistrationError(
                f"{component.kind}:{component.name}: promise {promise!r} reads the config field {name!r}, "
                f"which {component.config_cls.__name__} lacks; name the field {name!r} or drop the promise"
            )


def _check_serves(component: Component) -> None:
    """A size constraint is a callable of one argument, the ModelConfig (plugins are code; specs never are)."""
    serves = component.serves
    if serves is None:
        return
    wrong = f"{component.kind}:{component.name}: serves must be a callable (ModelConfig) -> bool"
    if not callable(serves):
        raise RegistrationError(f"{wrong}, found {serves!r}; e.g. a def with a one-line docstring saying "
                                f"which sizes it serves")
    try:
        inspect.signature(serves).bind(None)
    except TypeError:
        raise RegistrationError(f"{wrong} taking one argument, found {serves!r}") from None
    except ValueError:  # a builtin without a signature: nothing to check
        pass


def _is_frozen(cls: type) -> bool:
    return getattr(cls.__setattr__, "__name__", "") == "_frozen_setattrs"


@frozen
class Registry:
    """Every loaded component, plus the plugins that were quarantined."""

    _by_kind: dict[str, dict[str, tuple[Component, ...]]] = field(factory=dict)
    quarantined: tuple[Quarantine, ...] = ()
    skipped: tuple[Skipped, ...] = ()  # left out by the load policy
    unprobed: tuple[str, ...] = ()  # "kind:name (distribution): why" for components the probe could not check

    @classmethod
    def of(
        cls,
        components: list[Component],
        quarantined: list[Quarantine] = (),
        skipped: list[Skipped] = (),
        unprobed: list[str] = (),
    ) -> Registry:
        table: dict[str, dict[str, list[Component]]] = {kind: {} for kind in KINDS}
        for component in components:
            table[component.kind].setdefault(component.name, []).append(component)
        frozen_table = {k: {n: tuple(v) for n, v in names.items()} for k, names in table.items()}
        return cls(frozen_table, tuple(quarantined), tuple(skipped), tuple(unprobed))

    def __iter__(self) -> Iterator[Component]:
        for kind in KINDS:
            for name in sorted(self._by_kind.get(kind, {})):
                yield from self._by_kind[kind][name]

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def distributions(self) -> dict[str, tuple[str, int]]:
        """Each loaded distribution -> (version, number of components it registered)."""
        found: dict[str, tuple[str, int]] = {}
        for component in self:
            _, registered = found.get(component.distribution, (component.version, 0))
            found[component.distribution] = (component.version, registered + 1)
        return found

    def names(self, kind: str) -> list[str]:
        return sorted(self._by_kind.get(kind, {}))

    def providers(self, kind: str, name: str) -> tuple[Component, ...]:
        return self._by_kind.get(kind, {}).get(name, ())

    def ambiguous(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """(kind, name, distributions) for every name that more than one distribution provides.

        An unpinned ``use`` of such a name is refused by the spec reader (checkpoints settle
        it from their [lock]); ``list`` and ``doctor`` warn about each.
        """
        return [(kind, name, tuple(c.distribution for c in found))
                for kind in KINDS for name, found in sorted(self._by_kind.get(kind, {}).items()) if len(found) > 1]

    def get(self, kind: str, name: str, distribution: str | None = None) -> Component | None:
        """The one component for a name, or None when absent; ambiguity is the caller's to report."""
        found = self.providers(kind, name)
        if distribution is not None:
            found = tuple(c for c in found if c.distribution == distribution)
        return found[0] if len(found) == 1 else None

    def suggest(self, kind: str, name: str) -> str | None:
        return close_match(name, self.names(kind))
