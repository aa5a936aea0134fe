"""`blockspec check`: validate specs (and build them on the meta device); exit 2 on any problem."""

from __future__ import annotations

import argparse
import sys

from blockspec.registry.specs import load_spec
from blockspec.assembly.counting import count_parameters
from blockspec.errors import SpecError
from blockspec.cli.common import registry_with_warnings


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("check", help="validate spec files")
    parser.add_argument("specs", nargs="+", metavar="SPEC", help="TOML spec files")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    registry = registry_with_warnings(probe=True)  # check imports torch anyway; the probe adds ~0.1 s
    failed = 0
    for path in args.specs:
        try:
            spec = load_spec(path, registry)
            count = count_parameters(spec, registry)
        except SpecError as error:
            failed += 1
            for problem in error.problems:
                print(f"blockspec: error: {problem}", file=sys.stderr)
            continue
        print(f"ok  {path}  ({spec.model.name}: {count.exact:,} parameters)")
    return 2 if failed else 0
