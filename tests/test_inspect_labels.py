"""Labels come from the model's actual components: the explorer's header called a sandwich or parallel model
"pre-LN" (it printed ``[model] norm_placement``, which such a spec never sets)."""

from __future__ import annotations

import pytest
import torch

import blockspec
from blockspec.inspect.explore.export import explorer_data
from blockspec.inspect.layers import blocks_label, layers_text
from blockspec.inspect.trace import trace
from tests.test_explore import browser, chromium_path, open_page  # noqa: F401 (the fixture)

pytestmark = pytest.mark.usefixtures("one_thread")

MODEL = {"vocab_size": 65, "context_length": 16, "d_model": 16, "n_layers": 3, "n_heads": 2, "d_ff": 24}


def spec_of(registry, block: str, layers: list | None = None) -> blockspec.ModelSpec:
    document = {"model": MODEL, "block": {"use": block}, "positional": {"use": "rope"}, "norm": {"use": "rmsnorm"},
                "activation": {"use": "gelu"}, "head": {"use": "lm"}}
    if layers is not None:
        document["layers"] = layers
    return blockspec.structure_spec(document, registry)


def header_data(registry, spec) -> dict:
    model = blockspec.build(spec, registry=registry, seed=0).eval()
    ids = [1, 2, 3]
    return explorer_data(model, trace(model, torch.tensor([ids])), ids=ids, label_of=str, weights="random",
                         tokenizer=None)["model"]


@pytest.mark.parametrize("block", ["sandwich", "parallel", "output_norm", "post", "pre"])
def test_the_explorer_names_the_block_the_layers_use(registry, block):
    info = header_data(registry, spec_of(registry, block))
    assert info["blocks"] == f"{block} blocks"
    assert "norm_placement" not in info  # main: "pre" for every block but post's, shown as "pre-LN"


def test_layers_that_use_another_block_are_named_apart(registry):
    spec = spec_of(registry, "pre", layers=[{"index": [2], "block": {"use": "parallel"}}])
    assert header_data(registry, spec)["blocks"] == "pre blocks (0, 1), parallel (2)"


def test_layer_sets_read_as_runs_or_strides():
    assert layers_text((0, 1, 2, 3)) == "0-3"
    assert layers_text((1, 3, 5, 7, 9)) == "1, 3, ..., 9"
    assert layers_text((0, 1, 2)) == "0-2"
    assert layers_text((0, 1, 2, 5)) == "0-2, 5"
    assert layers_text((4,)) == "4"
    assert layers_text((0, 2)) == "0, 2"


def test_a_block_no_component_made_reads_as_its_class(registry):
    model = blockspec.build(spec_of(registry, "pre"), registry=registry, seed=0)
    del model.provenance["blocks.1"]
    assert blocks_label(model) == "pre blocks (0, 2), PreNormBlock (1)"


def test_the_page_header_says_sandwich_not_pre_ln(browser, tmp_path, registry):  # noqa: F811
    from blockspec.cli import main

    spec = tmp_path / "sandwich.toml"
    spec.write_text(blockspec.dump_spec(spec_of(registry, "sandwich")))
    out = tmp_path / "page.html"
    assert main(["explore", str(spec), "--ids", "1,2,3", "--out", str(out)]) == 0
    page, errors = open_page(browser, out)
    meta = page.inner_text("#meta")
    assert "sandwich blocks" in meta and "pre-LN" not in meta and "undefined" not in meta
    assert errors == []
    page.close()
