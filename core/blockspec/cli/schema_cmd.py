"""`blockspec schema`: the JSON Schema of a spec for the installed components, for editors (docs/schema.md).

Without --out the schema is the output, on stdout, with or without --json (it is JSON already). With
--out FILE it is written atomically, and stdout gets a report: a line, or with --json an object.
"""

from __future__ import annotations

import argparse
from typing import Any

from blockspec.checkpoint.lock import LockDocument
from blockspec.outputs.atomic_file import write_atomically
from blockspec.registry.components import Registry
from blockspec.registry.spec_schema import SCHEMA_FILE, schema_text, spec_schema
from blockspec.registry.specs import ambiguity_warnings
from blockspec.cli.common import add_json_argument, check_output, emit_json, print_warning, registry_with_warnings


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("schema", help="write the JSON Schema of specs, for editor completion and checks")
    parser.add_argument("--out", metavar="FILE", help="write the schema to FILE (in an existing folder) "
                                                      "instead of printing it")
    parser.add_argument("--force", action="store_true", help="replace FILE if it is a schema blockspec wrote")
    add_json_argument(parser, "the schema without --out; with --out, a JSON object (out, components, "
                              "distributions)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.out is not None:  # refused before the plugins load
        check_output("--out", args.out, kind=SCHEMA_FILE, force=args.force)
    registry = registry_with_warnings()
    for line in ambiguity_warnings(registry):  # such names are in the schema only pinned
        print_warning(line)
    schema = spec_schema(registry, documents=(LockDocument,))
    if args.out is None:
        emit_json(schema)
        return 0
    write_atomically(args.out, schema_text(schema))
    report = _report(args.out, registry)
    if args.json:
        emit_json(report)
    else:
        print(f"wrote {args.out}: the spec schema for {report['components']} components "
              f"from {len(report['distributions'])} distributions")
    return 0


def _report(out: str, registry: Registry) -> dict[str, Any]:
    distributions = {name: version for name, (version, _) in sorted(registry.distributions().items())}
    return {"out": out, "components": len(registry), "distributions": distributions}
