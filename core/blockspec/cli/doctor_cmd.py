"""`blockspec doctor`: which plugins loaded, which did not and why, the policy in force, versions.

Doctor also probes every component (builds it tiny on the CPU and checks its kind's shape
contract), which ``list`` does not do because it costs a torch import.
"""

from __future__ import annotations

import argparse
import platform
import sys

from blockspec.registry.loading import STRICT_ENV, strict_default
from blockspec.registry.policy import current_policy
from blockspec.registry.components import Registry
from blockspec.cli.common import add_json_argument, emit_json, print_table, print_warning, registry_with_warnings
from blockspec.registry.specs import ambiguity_warnings


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("doctor", help="loaded and quarantined plugins, load policy, versions")
    add_json_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    policy = current_policy()
    registry = registry_with_warnings(probe=True)
    for line in ambiguity_warnings(registry):
        print_warning(line)
    report = _report(registry, policy.describe())
    if args.json:
        emit_json(report)
    else:
        _print(report)
    return 0


def _report(registry: Registry, policy: str) -> dict:
    return {
        "python": platform.python_version(),
        "torch": _torch_version(),
        "policy": policy,
        "strict": strict_default(),
        "loaded": [{"distribution": d, "version": v, "components": n}
                   for d, (v, n) in sorted(registry.distributions().items())],
        "quarantined": [{"distribution": q.distribution, "version": q.version, "cause": q.cause}
                        for q in registry.quarantined],
        "skipped": [{"distribution": s.distribution, "version": s.version, "reason": s.reason}
                    for s in registry.skipped],
        "unprobed": list(registry.unprobed),
    }


def _torch_version() -> str:
    try:
        import torch
    except ImportError as error:  # doctor must report a broken environment, not die of it
        return f"not importable ({error})"
    return torch.__version__


def _print(report: dict) -> None:
    print(f"python   {report['python']} ({sys.executable})")
    print(f"torch    {report['torch']}")
    print(f"policy   {report['policy']}")
    print(f"strict   {'on' if report['strict'] else 'off'} ({STRICT_ENV})\n")
    rows = [(r["distribution"], r["version"], str(r["components"])) for r in report["loaded"]]
    print_table(("LOADED", "VERSION", "COMPONENTS"), rows, right=(2,))
    for title, key, detail in (("QUARANTINED", "quarantined", "cause"), ("NOT LOADED", "skipped", "reason")):
        if report[key]:
            print()
            print_table((title, "VERSION", detail.upper()),
                        [(r["distribution"], r["version"], r[detail]) for r in report[key]])
    if report["unprobed"]:
        print("\nnot probed (the shape contract could not be checked):")
        for line in report["unprobed"]:
            print(f"  {line}")
