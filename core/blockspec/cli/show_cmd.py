"""`blockspec show`: the assembled model as a table of modules, shapes, parameters and providers."""

from __future__ import annotations

import argparse

import attrs

from ..sources import load_spec_or_checkpoint
from ..summary import ModelSummary, ModuleRow, summarize
from .common import print_json, print_table, registry_with_warnings


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("show", help="show the assembled model: modules, shapes, parameters")
    parser.add_argument("spec", metavar="SPEC", help="TOML spec file, checkpoint or Hugging Face directory")
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    registry = registry_with_warnings()
    summary = summarize(load_spec_or_checkpoint(args.spec, registry), registry)
    if args.json:
        print_json(_as_json(summary))
    else:
        _print(summary)
    return 0


def _as_json(summary: ModelSummary) -> dict:
    return {
        "name": summary.name,
        "parameters": summary.parameters,
        "parameters_estimate": summary.parameters_estimate,
        "modules": [attrs.asdict(row) for row in summary.rows],
    }


def _print(summary: ModelSummary) -> None:
    rows = [_cells(row) for row in _collapse(summary.rows)]
    print(f"{summary.name}  (N = sequence length; batch dimension omitted)\n")
    print_table(("MODULE", "TYPE", "OUTPUT", "PARAMETERS", "COMPONENT", "DISTRIBUTION"), rows, right=(3,))
    print(f"\ntotal parameters      {summary.parameters:>15,}")
    error = (summary.parameters_estimate - summary.parameters) / summary.parameters if summary.parameters else 0.0
    print(f"12·L·d² + |V|·d       {summary.parameters_estimate:>15,}  ({error:+.2%} vs exact)")


def _collapse(rows: tuple[ModuleRow, ...]) -> list[ModuleRow]:
    """Show blocks.0 in full; the identical blocks after it as one row."""
    blocks = [r for r in rows if r.path.startswith("blocks.") and r.depth == 0]
    if len(blocks) <= 1:
        return list(rows)
    kept = [r for r in rows if not r.path.startswith("blocks.") or r.path.split(".")[1] == "0"]
    rest = blocks[1:]
    merged = attrs.evolve(rest[0], path=f"blocks.1-{len(blocks) - 1}", module=f"{rest[0].module} x{len(rest)}",
                          parameters=sum(r.parameters for r in rest))
    index = max(i for i, r in enumerate(kept) if r.path.startswith("blocks.0")) + 1
    return kept[:index] + [merged] + kept[index:]


def _cells(row: ModuleRow) -> tuple[str, ...]:
    indent = "  " * row.depth
    return (indent + row.path, row.module, row.shape, f"{row.parameters:,}",
            row.component or "", row.distribution or "")
