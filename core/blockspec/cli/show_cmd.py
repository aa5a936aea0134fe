"""`blockspec show`: the assembled model as a table of modules, shapes, parameters and providers."""

from __future__ import annotations

import argparse
import json

import attrs

from blockspec.sources import open_source
from blockspec.inspect.layers import LayerGroup, layers_text
from blockspec.inspect.summary import (
    ModelSummary,
    ModuleRow,
    TreeNode,
    component_tree,
    fold_blocks,
    layer_groups,
    summarize,
)
from blockspec.cli.common import add_json_argument, emit_json, print_table, registry_with_warnings


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("show", help="show the assembled model: modules, shapes, parameters")
    parser.add_argument("spec", metavar="SPEC", help="TOML spec file, checkpoint or Hugging Face directory")
    add_json_argument(parser)
    parser.add_argument("--tree", action="store_true",
                        help="the resolved component tree: every module, its provider, parameters and shape")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    registry = registry_with_warnings()
    if args.tree:
        return _run_tree(args, registry)
    summary = summarize(open_source(args.spec, registry).spec, registry)
    if args.json:
        emit_json(_as_json(summary))
    else:
        _print(summary)
    return 0


def _as_json(summary: ModelSummary) -> dict:
    return {
        "name": summary.name,
        "parameters": summary.parameters,
        "parameters_active": summary.parameters_active,
        "parameters_estimate": summary.parameters_estimate,
        "layers": [{**attrs.asdict(group), "layers": list(group.layers)} for group in summary.layers],
        "modules": [attrs.asdict(row) for row in summary.rows],
        "adapted": [attrs.asdict(row) for row in summary.adapted],
        "parameters_adapter": summary.parameters_adapter,
    }


def _print(summary: ModelSummary) -> None:
    rows = [_cells(row) for row in fold_blocks(summary.rows, summary.layer_groups)]
    print(f"{summary.name}  (N = sequence length; batch dimension omitted)\n")
    print_table(("MODULE", "TYPE", "OUTPUT", "PARAMETERS", "COMPONENT", "DISTRIBUTION"), rows, right=(3,))
    print("\nlayers: each kind's component, its options as the spec gives them, and the layers that use it\n")
    n_layers = len(summary.layer_groups)
    print_table(("KIND", "COMPONENT", "OPTIONS", "LAYERS"), [_layer_cells(g, n_layers) for g in summary.layers])
    if summary.adapted:
        print("\nadapters: the layers [[adapters]] wrap, and each adapter's own parameters\n")
        print_table(("MODULE", "COMPONENT", "PARAMETERS", "DISTRIBUTION"),
                    [(r.path, r.component, f"{r.parameters:,}", r.distribution) for r in summary.adapted], right=(2,))
    _print_counts(summary)


def _layer_cells(group: LayerGroup, n_layers: int) -> tuple[str, ...]:
    options = ", ".join(f"{key}={json.dumps(value)}" for key, value in group.options.items())
    share = "all" if len(group.layers) == n_layers else f"{len(group.layers)} of {n_layers}"
    return (group.kind, group.component, options, f"{layers_text(group.layers)} ({share})")


def _print_counts(summary: ModelSummary) -> None:
    """The exact total; what a token passes through where that is less; the estimate where it describes the model."""
    print(f"\ntotal parameters      {summary.parameters:>15,}")
    active = summary.parameters_active
    if active is not None and active != summary.parameters:
        print(f"active per token      {active:>15,}  ({active / summary.parameters:.1%}: the experts a token "
              "is routed to, and every dense part)")
    if summary.adapted:
        share = summary.parameters_adapter / summary.parameters
        print(f"adapter parameters    {summary.parameters_adapter:>15,}  ({share:.2%}: what trains with the base frozen)")
    estimate = summary.parameters_estimate
    if estimate is not None:
        error = (estimate - summary.parameters) / summary.parameters if summary.parameters else 0.0
        print(f"12·L·d² + |V|·d       {estimate:>15,}  ({error:+.2%} vs exact)")


def _cells(row: ModuleRow) -> tuple[str, ...]:
    indent = "  " * row.depth
    return (indent + row.path, row.module, row.shape, f"{row.parameters:,}",
            row.component or "", row.distribution or "")


# -- --tree ----------------------------------------------------------------------------------------------


def _run_tree(args: argparse.Namespace, registry) -> int:
    spec = open_source(args.spec, registry).spec
    tree = component_tree(spec, registry)
    if args.json:
        emit_json({"name": spec.model.name, "tree": _tree_json(tree)})
        return 0
    print(f"{spec.model.name}  (N = sequence length; batch dimension omitted; built on the meta device)\n")
    uniform = len(set(layer_groups(spec))) <= 1  # layers that [[layers]] configures apart never fold
    rows = [(spec.model.name, *_tree_cells(tree)[1:])] + _tree_rows(tree.children, "", uniform)
    print_table(("MODULE", "TYPE", "OUTPUT", "PARAMETERS", "PROVIDER"), rows, right=(3,))
    return 0


def _tree_json(node: TreeNode) -> dict:
    record = attrs.asdict(node, recurse=False, filter=lambda a, _: a.name != "children")
    record["tied"] = list(node.tied)
    record["children"] = [_tree_json(child) for child in node.children]
    return record


def _tree_rows(nodes: tuple[TreeNode, ...], indent: str, uniform: bool = True) -> list[tuple[str, ...]]:
    """Rows with tree glyphs; blocks after blocks.0 fold into one row when they repeat it."""
    nodes, folded = _fold_blocks(nodes) if uniform else (nodes, None)
    rows: list[tuple[str, ...]] = []
    for index, node in enumerate(nodes):
        last = index == len(nodes) - 1 and folded is None
        rows.append((indent + ("└─ " if last else "├─ ") + node.name, *_tree_cells(node)[1:]))
        rows += _tree_rows(node.children, indent + ("   " if last else "│  "), uniform)
    if folded is not None:
        rows.append((indent + "└─ " + folded[0], *folded[1:]))
    return rows


def _fold_blocks(nodes: tuple[TreeNode, ...]):
    """blocks.1..L-1 as one row "1-11 (x11, as 0)" when they match blocks.0 in type and size."""
    if len(nodes) < 2 or not nodes[0].path.startswith("blocks."):
        return nodes, None
    first, rest = nodes[0], nodes[1:]
    if any((n.module, n.parameters) != (first.module, first.parameters) for n in rest):
        return nodes, None
    label = f"{rest[0].name}-{rest[-1].name}  (x{len(rest)}, each as {first.name})" if len(rest) > 1 \
        else f"{rest[0].name}  (as {first.name})"
    total = sum(n.parameters for n in rest)
    return (first,), (label, first.module, first.shape, f"{total:,}", "")


def _tree_cells(node: TreeNode) -> tuple[str, ...]:
    provider = ""
    if node.component:
        provider = f"{node.component}  {node.distribution} {node.version}"
    if node.tied:
        provider = (provider + "  " if provider else "") + "tied: " + ", ".join(node.tied)
    return (node.name, node.module, node.shape, f"{node.parameters:,}", provider)
