"""`blockspec show` tells the whole model: which layers slide (and their window), which use another RoPE
base, which are MoE, which use another block or norm, in its text and under --json."""

from __future__ import annotations

import json

import pytest

import blockspec
from blockspec.cli import main
from tests.conftest import SPECS

MODEL = {"name": "mixed", "vocab_size": 61, "context_length": 16, "d_model": 32, "n_layers": 4, "n_heads": 4,
         "d_ff": 24}
LAYERS = [
    {"index": [1, 3], "ffn": {"use": "moe", "n_experts": 4, "top_k": 1}},
    {"index": [3], "positional": {"base": 500000.0}, "block": {"use": "parallel"}, "norm": {"use": "layernorm"}},
]


def shown(capsys, spec, *flags) -> str:
    assert main(["show", str(spec), *flags]) == 0
    return capsys.readouterr().out


@pytest.fixture
def mixed(tmp_path, registry):
    document = {"model": MODEL, "positional": {"use": "rope"}, "norm": {"use": "rmsnorm"},
                "activation": {"use": "swiglu"}, "head": {"use": "lm"}, "layers": LAYERS}
    path = tmp_path / "mixed.toml"
    path.write_text(blockspec.dump_spec(blockspec.structure_spec(document, registry)))
    return path


def groups(document: dict, kind: str) -> list[tuple[str, dict, list[int]]]:
    return [(g["component"], g["options"], g["layers"]) for g in document["layers"] if g["kind"] == kind]


def test_gemma_says_which_layers_slide_and_their_window(capsys):
    document = json.loads(shown(capsys, SPECS / "gemma-2-2b.toml", "--json"))
    sliding, full = groups(document, "attention")
    assert sliding == ("attention:causal", {"logit_softcap": 50.0, "sliding_window": 4096, "query_scale": 0.0625},
                       list(range(0, 26, 2)))
    assert full[1] == {"logit_softcap": 50.0, "query_scale": 0.0625} and full[2] == list(range(1, 26, 2))
    text = shown(capsys, SPECS / "gemma-2-2b.toml")
    line = next(row for row in text.splitlines() if "sliding_window=4096" in row)
    assert line.startswith("attention") and line.endswith("0, 2, ..., 24 (13 of 26)")


def test_moe_rope_base_block_and_norm_layers_are_named(capsys, mixed):
    document = json.loads(shown(capsys, mixed, "--json"))
    assert [(c, layers) for c, _, layers in groups(document, "ffn")] == [("ffn:dense", [0, 2]), ("ffn:moe", [1, 3])]
    assert groups(document, "ffn")[1][1]["top_k"] == 1
    bases = [(options["base"], layers) for _, options, layers in groups(document, "positional")]
    assert bases == [(10000.0, [0, 1, 2]), (500000.0, [3])]
    assert [(c, layers) for c, _, layers in groups(document, "block")] == [("block:pre", [0, 1, 2]),
                                                                          ("block:parallel", [3])]
    assert [(c, layers) for c, _, layers in groups(document, "norm")] == [("norm:rmsnorm", [0, 1, 2]),
                                                                         ("norm:layernorm", [3])]
    text = shown(capsys, mixed)
    assert any(row.startswith("ffn") and "ffn:moe" in row and row.endswith("1, 3 (2 of 4)")
               for row in text.splitlines())
    assert "active per token" in text and "12·L·d²" not in text  # two MoE layers: the dense formula is left out


def test_a_uniform_model_lists_each_kind_once_for_every_layer(capsys):
    document = json.loads(shown(capsys, SPECS / "gpt2-small.toml", "--json"))
    assert [g["kind"] for g in document["layers"]] == ["block", "attention", "ffn", "norm", "activation", "positional"]
    assert all(g["layers"] == list(range(12)) for g in document["layers"])
