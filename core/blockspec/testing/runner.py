"""Run the declared properties of registered components; collect passed / failed / could not check / not applicable.

Statuses: "passed"; "failed" (the promise is broken, the check crashed, or the same example gave two
verdicts: nondeterministic); "could not check" (the component promises it, but its module lacks what the
check reads, e.g. a causal attention without ``project()``: the check raised NotApplicable; or its build
refused every drawn size; or no drawn size is one it ``serves``); "not applicable" (not promised, or a
``when`` rule excludes it). Only "failed" fails a run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Literal

from attrs import define, field, frozen
from hypothesis import HealthCheck, Phase, Verbosity, given, reject, settings
from hypothesis.errors import Flaky, Unsatisfiable
from hypothesis.reporting import with_reporter

from blockspec.registry.components import Component, Quarantine, Registry, Skipped
from blockspec.spec.kinds import REQUIRES
from blockspec.testing.cases import Case
from blockspec.testing.errors import NotApplicable, PropertyFailure, Refused
from blockspec.testing.harness import one_thread
from blockspec.testing.nondeterminism import nondeterministic
from blockspec.testing.properties import Property, properties_for
from blockspec.testing.refusals import NoneLeft, Tally, refusing
from blockspec.testing.same_draws import without_local_constants

Status = Literal["passed", "failed", "could not check", "not applicable"]
STATUSES: tuple[Status, ...] = ("passed", "failed", "could not check", "not applicable")
DEFAULT_MAX_EXAMPLES = 25  # the one default: `blockspec verify`, verify_distribution and check() alike
THOROUGH_MAX_EXAMPLES = 500  # `blockspec verify --thorough`, `pytest --blockspec-thorough`: release checks


def budget(max_examples: int | None = None, *, thorough: bool = False) -> int:
    """Examples per component x property: an explicit count, else the thorough or the default budget.

    Never the active hypothesis profile's max_examples: one plugin gets one verdict from the CLI and pytest.
    """
    if max_examples is not None:
        return max_examples
    return THOROUGH_MAX_EXAMPLES if thorough else DEFAULT_MAX_EXAMPLES


@frozen(kw_only=True)
class Result:
    """One component x property cell; ``example`` is hypothesis' shrunk falsifying case."""

    component: Component
    property: str
    status: Status
    message: str = ""
    example: Case | None = None

    @property
    def passed(self) -> bool:
        return self.status != "failed"

    def as_dict(self) -> dict[str, Any]:
        c = self.component
        return {"kind": c.kind, "name": c.name, "distribution": c.distribution, "version": c.version,
                "property": self.property, "status": self.status, "message": self.message,
                "example": self.example.as_dict() if self.example else None,
                "example_text": str(self.example) if self.example else None}


def select(registry: Registry, *, distribution: str | None = None, component: str | None = None) -> list[Component]:
    """Components by distribution and/or ``kind:name``; an empty choice is the caller's to report."""
    kind, _, name = (component or "").partition(":")
    return [c for c in registry
            if distribution in (None, c.distribution) and (component is None or (c.kind, c.name) == (kind, name))]


def not_loaded(registry: Registry, distribution: str) -> Quarantine | Skipped | None:
    """Why ``distribution`` registered nothing, when it is installed: quarantined (with the cause) or
    left out by the load policy; None for a name no installed plugin has. Names compare as pip does."""
    wanted = _normalized(distribution)
    return next((entry for entry in (*registry.quarantined, *registry.skipped)
                 if _normalized(entry.distribution) == wanted), None)


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def verify(components: Iterable[Component], *, max_examples: int | None = None, device: str = "cpu",
           only: Iterable[str] | None = None) -> list[Result]:
    """Every property that concerns each component, in table order; ``only`` limits to named properties."""
    wanted = set(only) if only is not None else None
    return [
        check(component, prop, max_examples=max_examples, device=device)
        for component in components
        for prop in properties_for(component.kind)
        if wanted is None or prop.name in wanted
    ]


def check(component: Component, prop: Property, *, max_examples: int | None = None,
          device: str = "cpu") -> Result:
    """Run one property with hypothesis; a failure comes back with the shrunk example that shows it.

    A build that refuses the drawn sizes (ValueError, TypeError) makes that draw no example; a property whose
    every draw was refused, or left none the component ``serves``, could not be checked. An example that fails
    once and passes when replayed is a failure: the component is nondeterministic.
    """
    if not prop.applies(component):
        return Result(component=component, property=prop.name, status="not applicable",
                      message=_undeclared(component, prop))
    trace, tally = _Trace(), Tally()
    test = _hypothesis_test(refusing(component, tally), prop, trace, max_examples, device)
    try:
        with with_reporter(lambda _text: None), one_thread(), without_local_constants():
            test()
    except NoneLeft as stop:
        return Result(component=component, property=prop.name, status="could not check",
                      message=_unchecked(component, prop, str(stop)))
    except Exception as error:
        return _verdict(component, prop, trace, tally, error, device)
    if tally.refused and not tally.built:  # every example that passed built nothing (a model without layers)
        return Result(component=component, property=prop.name, status="could not check",
                      message=_unchecked(component, prop, tally.every_draw_refused()))
    return Result(component=component, property=prop.name, status="passed")


@define
class _Trace:
    """The failing cases (hypothesis replays the shrunk one last) and the cases that passed, by their text."""

    failing: list[Case] = field(factory=list)
    passed: set[str] = field(factory=set)

    def replayed(self) -> Case:
        """The failing case hypothesis replayed and saw pass, if it is known; else the last failing one."""
        return next((c for c in reversed(self.failing) if str(c) in self.passed), self.failing[-1])


def _verdict(component: Component, prop: Property, trace: _Trace, tally: Tally, error: Exception,
             device: str) -> Result:
    """The cell's status and message when the hypothesis run raised ``error``."""
    def result(status: Status, message: str, example: Case | None = None) -> Result:
        return Result(component=component, property=prop.name, status=status, message=message, example=example)

    if isinstance(error, NotApplicable):
        return result("could not check", _unchecked(component, prop, error))
    if isinstance(error, PropertyFailure):
        return result("failed", str(error), trace.failing[-1] if trace.failing else None)
    if isinstance(error, Flaky) and trace.failing:
        case = trace.replayed()
        detail = nondeterministic(component, case, _first_failure(error), device)
        return result("failed", str(prop.failure(component, detail)), case)
    if isinstance(error, Unsatisfiable) and tally.refused and not tally.built:
        return result("could not check", _unchecked(component, prop, tally.every_draw_refused()))
    if isinstance(error, Unsatisfiable) and (tally.refused or component.serves is not None):
        return result("could not check", _unchecked(component, prop, tally.none_left(component)))
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""  # hypothesis itself gave up
    detail = f"hypothesis found no example to check: {type(error).__name__}: {first}"
    return result("failed", str(prop.failure(component, detail)))


def _first_failure(error: Exception) -> str:
    """The detail of the failure the first run raised, out of hypothesis' Flaky report."""
    found = [e for e in getattr(error, "exceptions", ()) if isinstance(e, PropertyFailure)]
    return found[0].detail if found else str(error).strip().splitlines()[0]


def _hypothesis_test(component: Component, prop: Property, trace: _Trace, max_examples: int | None,
                     device: str):
    configured = settings(max_examples=prop.examples(budget(max_examples)), deadline=None, database=None,
                          derandomize=True, verbosity=Verbosity.quiet, print_blob=False, report_multiple_bugs=False,
                          phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
                          suppress_health_check=list(HealthCheck))

    @configured
    @given(prop.strategy(component))
    def run(case: Case) -> None:
        try:
            prop(component, case, device)
        except Refused:  # the tally has it
            reject()
        except PropertyFailure:
            trace.failing.append(case)
            raise
        trace.passed.add(str(case))

    return run


def _unchecked(component: Component, prop: Property, error: NotApplicable | str) -> str:
    return (f"{component.kind}:{component.name} (from {component.distribution} {component.version}) "
            f"could not check {prop.name}: {error}")


def _undeclared(component: Component, prop: Property) -> str:
    if prop.promise is not None and prop.promise not in component.promises:
        said = f"{component.kind}:{component.name} does not promise {prop.promise!r}"
        needed = REQUIRES.get((component.kind, prop.promise))
        if needed in component.promises:  # e.g. rotary alone: it no longer implies norm_preserving
            said += f" ({needed!r} alone does not imply it; declare {prop.promise!r} if it holds)"
        return said
    if prop.when is not None and prop.when.__doc__:
        return f"{component.kind}:{component.name}: {prop.when.__doc__.strip()}"
    return f"does not apply to {component.kind}:{component.name}"
