"""`blockspec verify`: run the conformance kit against installed components; exit 1 if a promise breaks.

A check that could not run ("n/c": the module lacks what it reads) is listed with its reason but does
not fail the run; a usage error exits 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from blockspec.errors import BlockspecError
from blockspec.spec.kinds import KINDS
from blockspec.registry.components import Registry
from blockspec.cli.common import (add_device_argument, add_json_argument, emit_json, positive_int, print_table,
                                  registry_with_warnings, resolve_device)

CELLS = {"passed": "pass", "failed": "FAIL", "could not check": "n/c", "not applicable": "-"}


class VerifyUsageError(BlockspecError, ValueError):
    """verify was asked for something it cannot run (nothing selected, kit not installed)."""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "verify", help="check installed components against the promises they declare (needs hypothesis)")
    parser.add_argument("--distribution", metavar="NAME", help="only components of this distribution")
    parser.add_argument("--component", metavar="KIND:NAME", help="only this component, e.g. norm:rmsnorm")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--max-examples", type=positive_int, default=None, metavar="N",
                        help="hypothesis examples per component x property "
                             "(default: 25; whole-model checks run a quarter)")
    budget.add_argument("--thorough", action="store_true",
                        help="the release budget: 500 examples per component x property (about 20 times longer)")
    add_device_argument(parser)
    add_json_argument(parser, "a JSON array of results")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    _require_kit()
    device = resolve_device(args.device)
    from blockspec.testing.runner import budget, select, verify

    registry = registry_with_warnings()
    _check_selection(registry, args.distribution, args.component)
    components = select(registry, distribution=args.distribution, component=args.component)
    results = verify(components, max_examples=budget(args.max_examples, thorough=args.thorough),
                     device=str(device))
    if args.json:
        emit_json([r.as_dict() for r in results])
    else:
        _print(results)
    return 0 if all(r.passed for r in results) else 1


def _require_kit() -> None:
    from blockspec.testing import HYPOTHESIS_MISSING

    try:
        import hypothesis  # noqa: F401
    except ImportError:
        raise VerifyUsageError(f"blockspec verify: {HYPOTHESIS_MISSING}") from None


def _check_selection(registry: Registry, distribution: str | None, component: str | None) -> None:
    """Nothing selected is a usage error with the choices (or why the plugin is not loaded), never an empty success."""
    distributions = sorted({c.distribution for c in registry})
    if distribution is not None and distribution not in distributions:
        from blockspec.testing.runner import not_loaded

        why = not_loaded(registry, distribution)
        if why is not None:  # "plugin X 1.0 quarantined: <cause>" / "plugin X 1.0 not loaded: <policy>"
            raise VerifyUsageError(f"--distribution: {distribution!r} registers no component to verify: {why}")
        raise VerifyUsageError(f"--distribution: no registered component comes from {distribution!r}; "
                               f"registered: {', '.join(distributions)}")
    if component is None:
        return
    kind, sep, name = component.partition(":")
    if not sep or kind not in KINDS or not name:
        raise VerifyUsageError(f"--component: expected KIND:NAME with KIND one of {', '.join(KINDS)}, "
                               f"found {component!r}")
    if not registry.providers(kind, name):
        close = registry.suggest(kind, name)
        hint = f"; did you mean {kind}:{close}?" if close else ""
        raise VerifyUsageError(f"--component: no {kind} named {name!r} is registered{hint}")


def _print(results: Sequence) -> None:
    for kind in KINDS:
        rows = [r for r in results if r.component.kind == kind]
        if rows:
            _print_kind(kind, rows)
    for result in (r for r in results if r.status == "could not check"):
        print(f"\nn/c {result.message}")
    for result in (r for r in results if r.status == "failed"):
        print(f"\nFAIL {result.message}")
        if result.example is not None:
            print(f"  falsifying example: {result.example}")
    counts = {s: sum(r.status == s for r in results) for s in CELLS}
    print(f"\n{counts['passed']} passed, {counts['failed']} failed, {counts['could not check']} could not check "
          f"(n/c), {counts['not applicable']} not applicable (not promised)")


def _print_kind(kind: str, rows: Sequence) -> None:
    properties = list(dict.fromkeys(r.property for r in rows))
    components = list(dict.fromkeys(r.component for r in rows))
    cell = {(r.component, r.property): CELLS[r.status] for r in rows}
    table = [(f"{kind}:{c.name}", c.distribution, *(cell.get((c, p), "") for p in properties)) for c in components]
    print()
    print_table(("COMPONENT", "DISTRIBUTION", *properties), table)
