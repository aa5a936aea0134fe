"""Merging adapters into the base (issue 26, item 4): ``merge_adapters``, ``unload_adapters`` and ``blockspec merge``.

A merged model is the plain model its spec without [[adapters]] builds, computing what the adapted one did in
eval mode; ``blockspec merge`` writes it as an ordinary checkpoint with the source's tokenizer and carried files,
and ``export-hf`` of that loads in transformers with blockspec's logits.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import torch
from torch import nn

import blockspec
from blockspec.assembly.merge import merge_adapters, unload_adapters
from blockspec.checkpoint.directory import load, read_extra_file, save
from blockspec.checkpoint.manifest import read_manifest
from blockspec.cli import main
from blockspec.errors import InputError
from blockspec.modules.adapter import Adapter

from .adapter_helpers import assert_close, gpt2_hf, imported, logits, trained, transformers, with_adapters

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "specs" / "tiny-shakespeare.toml"
IDS = torch.tensor([[1, 5, 9, 2, 7], [3, 3, 0, 64, 12]])  # (B, N) token ids below the example's 65
ENTRIES = ({"use": "lora", "targets": ["@attention"], "rank": 4, "alpha": 8.0},
           {"use": "dora", "targets": ["blocks.*.ffn.down"], "rank": 2})


@pytest.fixture(scope="module")
def document() -> dict:
    return tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))


def adapted_model(document: dict, registry, *entries: dict) -> blockspec.Transformer:
    spec = blockspec.structure_spec({**document, "adapters": list(entries or ENTRIES)}, registry)
    return trained(blockspec.build(spec, registry=registry, seed=0))


def test_a_merged_model_is_plain_and_computes_what_the_adapted_one_did(document, registry):
    model = adapted_model(document, registry)
    model.carried = {"config.json": b"{}"}
    expected = logits(model, IDS)
    paths = sorted(model.adapted)
    merged = merge_adapters(model)
    assert merged is model and merged.adapted == {} and merged.spec.adapters == ()
    assert not any(isinstance(m, Adapter) for m in merged.modules())
    assert all(type(merged.get_submodule(p)) is nn.Linear for p in paths)
    assert merged.carried == {"config.json": b"{}"}
    assert_close(logits(merged, IDS), expected, "merged")
    plain = blockspec.structure_spec(document, registry)
    assert merged.spec == blockspec.structure_spec(blockspec.spec_to_dict(plain), registry)


def test_the_merge_differs_from_the_base_so_the_test_above_can_fail(document, registry):
    adapted = adapted_model(document, registry)
    base = blockspec.build(blockspec.structure_spec(document, registry), registry=registry, seed=0)
    assert (logits(adapted, IDS) - logits(base, IDS)).abs().max() > 1e-2


def test_unloading_gives_back_the_base_the_spec_without_adapters_builds(document, registry):
    model = unload_adapters(adapted_model(document, registry))
    base = blockspec.build(blockspec.structure_spec(document, registry), registry=registry, seed=0)
    assert model.spec.adapters == () and model.adapted == {}
    assert torch.equal(logits(model, IDS), logits(base, IDS))


def test_a_model_without_adapters_is_refused_in_one_line(document, registry):
    model = blockspec.build(blockspec.structure_spec(document, registry), registry=registry, seed=0)
    for fold in (merge_adapters, unload_adapters):
        with pytest.raises(InputError) as caught:
            fold(model)
        assert str(caught.value) == ("model: expected a model with adapters (its spec's [[adapters]]), found none; "
                                     "a model without adapters is plain already")


def test_merge_writes_an_ordinary_checkpoint_with_the_sources_tokenizer(document, registry, tmp_path, capsys):
    text = tmp_path / "play.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 40, encoding="utf-8")
    lora = tmp_path / "lora.toml"
    lora.write_text('[[adapters]]\nuse = "lora"\ntargets = ["@attention"]\nrank = 4\n', encoding="utf-8")
    flags = ["--data", str(text), "--steps", "1", "--batch-size", "2", "--eval-batches", "1"]
    assert main(["train", str(EXAMPLE), *flags, "--out", str(tmp_path / "base")]) == 0
    assert main(["train", str(tmp_path / "base"), "--adapters", str(lora), *flags, "--out", str(tmp_path / "tuned")]) == 0
    source = trained(load(tmp_path / "tuned"))  # B moved off zero: the merge must carry it
    save(source, tmp_path / "lora.bs", extra_files={"tokenizer.json": read_extra_file(tmp_path / "tuned",
                                                                                      "tokenizer.json")})
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "lora.bs"), "--out", str(tmp_path / "merged"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["merged"] == ["blocks.0.attn.proj", "blocks.0.attn.qkv", "blocks.1.attn.proj", "blocks.1.attn.qkv"]
    merged = load(tmp_path / "merged")
    assert merged.spec.adapters == () and "adapter" not in (tmp_path / "merged" / "spec.toml").read_text()
    assert_close(logits(merged, IDS), logits(source, IDS), "merged checkpoint")
    assert read_extra_file(tmp_path / "merged", "tokenizer.json") == read_extra_file(tmp_path / "tuned",
                                                                                     "tokenizer.json")
    assert read_manifest(tmp_path / "merged").extra["merged_from"] == "lora.bs"


def test_merge_of_an_imported_model_exports_to_transformers_with_blockspecs_logits(registry, tmp_path, capsys):
    model = with_adapters(imported(gpt2_hf(), tmp_path / "hf", registry), registry, *ENTRIES)
    save(model, tmp_path / "adapted")
    assert main(["merge", str(tmp_path / "adapted"), "--out", str(tmp_path / "merged")]) == 0
    assert main(["export-hf", str(tmp_path / "merged"), "--out", str(tmp_path / "export")]) == 0
    assert "6 adapted layers folded in; carried files: hf/config.json" in capsys.readouterr().out
    assert sorted(read_manifest(tmp_path / "merged").files) == ["hf/config.json", "hf/generation_config.json",
                                                                 "model.safetensors", "spec.toml"]
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "export")
    assert_close(logits(hf), logits(model), "transformers on the merged export")


def test_merge_refuses_a_source_without_adapters_and_an_existing_out(document, registry, tmp_path, capsys):
    plain = blockspec.build(blockspec.structure_spec(document, registry), registry=registry, seed=0)
    save(plain, tmp_path / "plain")
    assert main(["merge", str(tmp_path / "plain"), "--out", str(tmp_path / "merged")]) == 2
    err = capsys.readouterr().err
    assert err == (f"blockspec: error: {tmp_path / 'plain'}: $.adapters: expected [[adapters]] to merge, found none; "
                   "its weights are plain already: use it as it is\n")
    save(adapted_model(document, registry), tmp_path / "adapted")
    assert main(["merge", str(tmp_path / "adapted"), "--out", str(tmp_path / "plain")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err and "Traceback" not in err
    assert main(["merge", str(tmp_path / "adapted"), "--out", str(tmp_path / "plain"), "--force"]) == 0
    assert load(tmp_path / "plain").spec.adapters == ()
