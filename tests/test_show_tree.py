"""`blockspec show --tree`: the resolved component tree from the meta device."""

from __future__ import annotations

import json
from pathlib import Path

import blockspec
from blockspec.cli import main
from blockspec.inspect.summary import TreeNode, component_tree

SPECS = Path(__file__).resolve().parents[1] / "examples" / "specs"


def walk(node: TreeNode):
    yield node
    for child in node.children:
        yield from walk(child)


def by_path(tree: TreeNode) -> dict[str, TreeNode]:
    return {node.path: node for node in walk(tree)}


def test_tree_counts_each_parameter_once(example_spec, registry):
    spec = example_spec("tiny-shakespeare")
    tree = component_tree(spec, registry)
    nodes = by_path(tree)
    assert tree.parameters == blockspec.count_parameters(spec, registry).exact == 108_352
    assert sum(child.parameters for child in tree.children) == tree.parameters
    assert nodes["head"].parameters == 0 and nodes["head"].tied == ("head.weight -> embedding.weight",)
    assert nodes["blocks.0.ffn"].parameters == sum(c.parameters for c in nodes["blocks.0.ffn"].children)


def test_tree_names_providers_and_symbolic_shapes(example_spec, registry):
    nodes = by_path(component_tree(example_spec("llama-style"), registry))
    norm = nodes["blocks.3.norm2"]
    assert (norm.module, norm.component, norm.distribution, norm.shape) == (
        "RMSNorm", "norm:rmsnorm", "blockspec-norms", "N x 512")
    assert nodes["blocks.0.ffn.up"].shape == "N x 2752" and nodes["blocks.0.ffn.act"].shape == "N x 1376"
    assert nodes["blocks.0.attn.qkv"].shape == "N x 768"  # 512 + 2 kv heads x 64 x 2
    assert nodes["positional"].shape == "(rotates q, k)" and nodes["positional"].component == "positional:rope"
    assert nodes["head"].tied == () and nodes["head"].shape == "N x 32000"


def test_a_7b_spec_costs_no_memory(example_spec, registry):
    tree = component_tree(example_spec("llama2-7b"), registry)
    assert tree.parameters > 6_000_000_000


def test_cli_tree_text_and_json(capsys):
    assert main(["show", "--tree", str(SPECS / "gpt2-small.toml")]) == 0
    out = capsys.readouterr().out
    assert "└─ 1-11  (x11, each as 0)" in out and "tied: head.weight -> embedding.weight" in out
    assert "norm:layernorm  blockspec-norms" in out
    assert main(["show", "--tree", "--json", str(SPECS / "tiny-shakespeare.toml")]) == 0
    data = json.loads(capsys.readouterr().out)
    blocks = next(c for c in data["tree"]["children"] if c["path"] == "blocks")
    assert [b["path"] for b in blocks["children"]] == ["blocks.0", "blocks.1"]
    assert data["tree"]["parameters"] == 108_352
