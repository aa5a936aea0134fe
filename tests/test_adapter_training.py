"""Adapter-only fine-tuning (issue 26, item 3): `train CKPT --adapters FILE.toml` freezes the base, trains
the adapters, and keeps only them, with a reference to the base that refuses any other base.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import blockspec
from blockspec.cli import main
from blockspec.errors import CheckpointError
from blockspec.modules.adapter import Adapter, adapter_state
from blockspec.train.checkpointing import load_checkpoint

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "specs" / "tiny-shakespeare.toml"
TEXT = "".join(f"{word} " for i in range(1500) for word in ("to", "be", "or", "not")[i % 4 : i % 4 + 1])
LORA = """
[[adapters]]
use = "lora"
targets = ["@attention"]
rank = 4
alpha = 8
"""
TRAIN = ["--batch-size", "4", "--eval-every", "5", "--eval-batches", "1", "--lr", "1e-2", "--quiet"]


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def ok(capsys, *argv) -> str:
    code, out, err = cli(capsys, *argv)
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def room(tmp_path_factory):
    """(root with text.txt, lora.toml and base/, a 10-step checkpoint of the tiny example)."""
    root = tmp_path_factory.mktemp("adapter-training")
    (root / "text.txt").write_text(TEXT, encoding="utf-8")
    (root / "lora.toml").write_text(LORA, encoding="utf-8")
    assert main(["train", str(EXAMPLE), "--data", str(root / "text.txt"), "--steps", "10",
                 "--out", str(root / "base"), *TRAIN]) == 0
    return root


def adapter_run(capsys, room: Path, out: Path, steps: int, *extra) -> None:
    ok(capsys, "train", room / "base", "--adapters", room / "lora.toml", "--data", room / "text.txt",
       "--steps", steps, "--out", out, *TRAIN, *extra)


def test_the_checkpoint_holds_only_the_adapters_and_a_reference_to_the_base(room, capsys, tmp_path):
    adapter_run(capsys, room, tmp_path / "ad", 10)
    files = sorted(p.name for p in (tmp_path / "ad").iterdir())
    assert "model.safetensors" not in files and {"adapter.safetensors", "base.json"} <= set(files)
    stored = load_file(tmp_path / "ad" / "adapter.safetensors")
    assert stored and all(".lora_A." in name or ".lora_B." in name for name in stored)
    assert all(name.startswith("blocks.") and ".attn." in name for name in stored)
    base_json = json.loads((tmp_path / "ad" / "base.json").read_text())
    assert not Path(base_json["path"]).is_absolute()  # the two move together
    assert (tmp_path / "ad" / "base.json").parent.joinpath(base_json["path"]).resolve() == (room / "base").resolve()


def test_only_the_adapters_learn_and_the_loaded_model_is_base_plus_adapters(room, capsys, tmp_path):
    adapter_run(capsys, room, tmp_path / "ad", 10)
    base, adapted = blockspec.load(room / "base"), blockspec.load(tmp_path / "ad")
    base_state = base.state_dict()
    for path, module in adapted.named_modules():
        if isinstance(module, Adapter):
            assert torch.equal(module.base_layer.weight, base_state[f"{path}.weight"])  # the base did not move
            assert module.lora_B.weight.abs().sum() > 0  # B starts at zero: the adapters did
    names = set(load_checkpoint(tmp_path / "ad").optimizer_state["state"])
    assert names and names == set(adapter_state(adapted))  # AdamW keeps state for the adapters alone


def test_resuming_an_adapter_run_continues_it_bit_for_bit(room, capsys, tmp_path):
    adapter_run(capsys, room, tmp_path / "whole", 10)
    adapter_run(capsys, room, tmp_path / "half", 5)
    ok(capsys, "train", room / "base", "--adapters", room / "lora.toml", "--data", room / "text.txt",
       "--steps", 10, "--resume", tmp_path / "half", *TRAIN)
    whole, resumed = load_checkpoint(tmp_path / "whole"), load_checkpoint(tmp_path / "half")
    assert resumed.step == 10 and resumed.training["history"] == whole.training["history"]
    for name, tensor in adapter_state(blockspec.load(tmp_path / "whole")).items():
        assert torch.equal(tensor, adapter_state(blockspec.load(tmp_path / "half"))[name]), name


def test_adapters_refuse_a_base_whose_weights_changed(room, capsys, tmp_path):
    shutil.copytree(room / "base", tmp_path / "base")
    ok(capsys, "train", tmp_path / "base", "--adapters", room / "lora.toml", "--data", room / "text.txt",
       "--steps", 5, "--out", tmp_path / "ad", *TRAIN)
    other = blockspec.build(EXAMPLE, seed=7)
    shutil.rmtree(tmp_path / "base")
    blockspec.save(other, tmp_path / "base")
    with pytest.raises(CheckpointError, match=r"base\.json: \$\.weights_sha256: expected the base these adapters"):
        blockspec.load(tmp_path / "ad")
    code, _, err = cli(capsys, "generate", tmp_path / "ad", "--prompt", "to", "--max-new-tokens", 2)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "weights differ" in err


def test_resuming_onto_another_base_is_refused(room, capsys, tmp_path):
    adapter_run(capsys, room, tmp_path / "ad", 5)
    ok(capsys, "train", EXAMPLE, "--data", room / "text.txt", "--steps", 3, "--seed", 3, "--out", tmp_path / "b2",
       *TRAIN)
    code, _, err = cli(capsys, "train", tmp_path / "b2", "--adapters", room / "lora.toml", "--data",
                       room / "text.txt", "--steps", 8, "--resume", tmp_path / "ad", "--out", tmp_path / "ad2", *TRAIN)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "weights_sha256" in err, err
    assert not (tmp_path / "ad2").exists()


def test_a_missing_base_says_where_it_was_looked_for(room, capsys, tmp_path):
    shutil.copytree(room / "base", tmp_path / "base")
    ok(capsys, "train", tmp_path / "base", "--adapters", room / "lora.toml", "--data", room / "text.txt",
       "--steps", 3, "--out", tmp_path / "ad", *TRAIN)
    shutil.rmtree(tmp_path / "base")
    with pytest.raises(CheckpointError, match=r"base\.json: \$\.path: the base checkpoint .* is not there"):
        blockspec.load(tmp_path / "ad")


@pytest.mark.parametrize("table, where, what", [
    ('[[adapters]]\nuse = "lora"\ntargets = ["blocks.*.atn.qkv"]\n', "$.adapters[0].targets[0]", "matches no module"),
    ('[[adapters]]\nuse = "lora"\ntargets = ["@attention"]\nrank = 0\n', "$.adapters[0].rank", "rank"),
    ('[[adapters]]\nuse = "lora"\ntargets = ["@attention"]\nrank = 4096\n', "$.adapters[0].rank", "larger than"),
    ('[model]\nname = "x"\n[[adapters]]\nuse = "lora"\ntargets = ["@attention"]\n', "$.model", "[[adapters]] tables only"),
])
def test_a_bad_adapters_file_is_one_line_naming_it_before_anything_trains(room, capsys, tmp_path, table, where, what):
    (tmp_path / "bad.toml").write_text(table, encoding="utf-8")
    code, _, err = cli(capsys, "train", room / "base", "--adapters", tmp_path / "bad.toml", "--data",
                       room / "text.txt", "--steps", 2, "--out", tmp_path / "ad", *TRAIN)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "bad.toml" in err and where in err and what in err, err
    assert not (tmp_path / "ad").exists()


@pytest.mark.parametrize("source", ["spec", "adapted"])
def test_adapters_need_a_base_checkpoint_that_has_none_yet(room, capsys, tmp_path, source):
    given = EXAMPLE
    if source == "adapted":
        adapter_run(capsys, room, tmp_path / "ad", 3)
        given = tmp_path / "ad"
    code, _, err = cli(capsys, "train", given, "--adapters", room / "lora.toml", "--data", room / "text.txt",
                       "--steps", 2, "--out", tmp_path / "out", *TRAIN)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert ("base checkpoint" in err) if source == "spec" else ("[[adapters]] already" in err), err


@pytest.mark.parametrize("document, message", [
    (b"[1]", "$: expected a JSON object, found list"),
    (b"{", "not valid JSON"),
    (b'{"format": "blockspec-adapter-base", "version": 1, "path": "../b", "spec_sha256": "x", '
     b'"weights_sha256": "x"}', "$.spec_sha256: expected 64 lowercase hex digits"),
])
def test_a_damaged_base_json_is_named_with_its_path(document, message):
    from blockspec.checkpoint.base_ref import read_base_json

    with pytest.raises(CheckpointError) as caught:
        read_base_json(document, Path("ad"))
    assert str(caught.value).startswith("ad/base.json: ") and message in str(caught.value)


def test_an_edited_base_json_fails_the_manifest_before_it_is_read(room, capsys, tmp_path):
    adapter_run(capsys, room, tmp_path / "ad", 3)
    (tmp_path / "ad" / "base.json").write_text((tmp_path / "ad" / "base.json").read_text().replace("..", "/etc"))
    with pytest.raises(CheckpointError, match="base.json"):
        blockspec.load(tmp_path / "ad")
