"""`blockspec list`: every registered component with its provider."""

from __future__ import annotations

import argparse

from blockspec.spec.kinds import KINDS
from blockspec.cli.common import add_json_argument, emit_json, print_table, print_warning, registry_with_warnings
from blockspec.registry.specs import ambiguity_warnings


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("list", help="list registered components")
    parser.add_argument("--kind", action="append", choices=KINDS,
                        help="only components of this kind; repeat for several kinds")
    add_json_argument(parser, "a JSON array")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    registry = registry_with_warnings()
    for line in ambiguity_warnings(registry):
        print_warning(line)
    components = [c for c in registry if not args.kind or c.kind in args.kind]
    records = [
        {"kind": c.kind, "name": c.name, "distribution": c.distribution, "version": c.version,
         "summary": c.summary, "promises": sorted(c.promises)}
        for c in components
    ]
    if args.json:
        emit_json(records)
        return 0
    header = ("KIND", "NAME", "DISTRIBUTION", "VERSION", "SUMMARY")
    print_table(header, [tuple(r[k.lower()] for k in header) for r in records])
    return 0
