"""`blockspec show --tree`: the resolved component tree from the meta device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import blockspec
from blockspec.cli import main
from blockspec.inspect.summary import TreeNode, component_tree, fold_blocks, summarize

from .specs import spec_text

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


def gqa_spec(registry, **sizes) -> blockspec.ModelSpec:
    """d_model 24, 6 heads, 1 kv head: qkv is 24 + 2 x 4 = 32 wide, one less than the context of 33."""
    return blockspec.loads_spec(spec_text(**{**GQA, **sizes}), registry)


GQA = {"name": "gqa", "vocab_size": 65, "context_length": 33, "d_model": 24, "n_layers": 2,
       "n_heads": 6, "n_kv_heads": 1, "d_ff": 96}


def test_a_width_equal_to_a_probe_length_never_prints_as_n(registry):
    nodes = by_path(component_tree(gqa_spec(registry), registry))
    assert nodes["blocks.0.attn.qkv"].shape == "N x 32"
    assert nodes["blocks.1.ffn.up"].shape == "N x 96" and nodes["head"].shape == "N x 65"
    assert nodes["positional"].shape == "N x 24 (added)"
    assert {row.shape for row in summarize(gqa_spec(registry), registry).rows} == {"N x 24", "N x 24 (added)", "N x 65"}


def test_every_width_near_the_context_stays_a_number(registry):
    """Whatever the probe lengths are, a width next to the context length is never mistaken for N."""
    for kv_heads in (1, 2, 3, 6):
        qkv = 24 + 2 * kv_heads * 4
        for context in range(qkv - 2, qkv + 3):
            shape = by_path(component_tree(gqa_spec(registry, n_kv_heads=kv_heads, context_length=context),
                                           registry))["blocks.0.attn.qkv"].shape
            assert shape == f"N x {qkv}", (kv_heads, context)


@pytest.mark.parametrize(("layers", "folded"), [
    (1, []),
    (2, [("blocks.1", "PreNormBlock")]),
    (3, [("blocks.1-2", "PreNormBlock x2")]),
    (4, [("blocks.1-3", "PreNormBlock x3")]),
])
def test_show_folds_the_blocks_after_the_first_without_off_by_ones(layers, folded, registry, tmp_path, capsys):
    spec = gqa_spec(registry, n_layers=layers)
    rows = fold_blocks(summarize(spec, registry).rows)
    blocks = [(r.path, r.module) for r in rows if r.path.startswith("blocks.") and r.depth == 0]
    assert blocks == [("blocks.0", "PreNormBlock"), *folded]
    per_block = next(r.parameters for r in rows if r.path == "blocks.0")
    assert [r.parameters for r in rows if (r.path, r.module) in folded] == [per_block * (layers - 1)] * len(folded)
    path = tmp_path / "gqa.toml"
    path.write_text(spec_text(**{**GQA, "n_layers": layers}), encoding="utf-8")
    assert main(["show", str(path)]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("blocks.")]
    assert [line[:2] for line in lines] == [["blocks.0", "PreNormBlock"], *[[p, "PreNormBlock"] for p, _ in folded]]
    assert all("x1" not in line for line in lines)
