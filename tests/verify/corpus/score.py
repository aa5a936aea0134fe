"""Run the corpus through the kit: the property that catches each mutant; the correct set passing."""

from __future__ import annotations

from collections.abc import Iterable

import blockspec
from attrs import frozen

from blockspec.registry.components import Component, Registry
from blockspec.testing import check, verify
from blockspec.testing.properties import find
from tests.verify.corpus import MUTANTS, UNUSUAL, Entry, plugins


@frozen(kw_only=True)
class Verdict:
    """What the kit said about one entry.

    ``caught``: for a mutant, its named property failed; for a correct component, nothing failed.
    ``failed``: every property that failed, of those run. ``detail``: the named property's message,
    or why it did not fail; for a correct component, the first failure.
    """

    entry: Entry
    caught: bool
    failed: tuple[str, ...]
    detail: str


def load_corpus() -> Registry:
    """The built-ins and the corpus only; never strict, never probed, so no mutant is turned away at load."""
    return blockspec.load_registry(plugins=plugins(), entry_points=False, strict=False, probe=False)


def component(registry: Registry, entry: Entry) -> Component:
    found = registry.get(entry.kind, entry.name, UNUSUAL if entry.catches is None else MUTANTS)
    if found is None:
        raise LookupError(f"{entry.qualified} is not registered: {registry.quarantined}")
    return found


def judge_mutant(entry: Entry, registered: Component, *, max_examples: int, every: bool = False) -> Verdict:
    """Run the named property (``every``: all the kind's properties too); caught when the named one fails."""
    try:
        named = find(entry.catches, entry.kind)
    except LookupError:
        named = None
    others = verify([registered], max_examples=max_examples) if every else []
    failed = tuple(r.property for r in others if r.status == "failed")
    if named is None:
        return Verdict(entry=entry, caught=False, failed=failed, detail=f"no property {entry.catches!r} in this kit")
    result = next((r for r in others if r.property == named.name), None)
    result = result or check(registered, named, max_examples=max_examples)
    failed = failed if every else ((named.name,) if result.status == "failed" else ())
    detail = result.message or f"{named.name} {result.status}"
    return Verdict(entry=entry, caught=result.status == "failed", failed=failed, detail=detail)


def judge_correct(entry: Entry, registered: Component, *, max_examples: int) -> Verdict:
    """Every property of the kind; a correct component passes when none fails."""
    results = [r for r in verify([registered], max_examples=max_examples) if r.status == "failed"]
    detail = results[0].message if results else "every property holds"
    return Verdict(entry=entry, caught=not results, failed=tuple(r.property for r in results), detail=detail)


def judge(entries: Iterable[Entry], *, max_examples: int, every: bool = False) -> list[Verdict]:
    registry = load_corpus()
    return [judge_correct(e, component(registry, e), max_examples=max_examples) if e.catches is None
            else judge_mutant(e, component(registry, e), max_examples=max_examples, every=every)
            for e in entries]
