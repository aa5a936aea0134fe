"""Paths as users give them, and the export's tokenizer (issue 28).

``export-hf`` of a trained checkpoint carries its tokenizer (the one rule's: characters or a BPE) as a
``tokenizer.json`` that transformers' ``AutoTokenizer`` loads and that encodes a text to the ids blockspec's
own tokenizer gives. ``generate`` takes a Hugging Face folder as train, trace and show do, and ``check``
names a folder it cannot read once.
"""

from __future__ import annotations

import json

import pytest

import blockspec
from blockspec.cli import main

from .source_room import cli  # the room (every kind of source): conftest's session fixture

pytest.importorskip("tokenizers")

TEXTS = ["the lord", "ROMEO:\nWhat say you, my sweet love?\n\n", "  thou  art good. "]


@pytest.fixture(scope="module")
def trained(room):
    """The source room's BPE and character checkpoints (one training step each) and their exports."""
    for name, checkpoint in (("bpe", "training"), ("char", "char")):
        cli("export-hf", room / checkpoint, "--out", room / f"{name}-hf")
    return room


CHECKPOINTS = {"bpe": "training", "char": "char"}


@pytest.mark.parametrize("name", ["bpe", "char"])
def test_an_export_carries_the_checkpoints_tokenizer_for_auto_tokenizer(trained, name):
    transformers = pytest.importorskip("transformers")
    export = trained / f"{name}-hf"
    assert (export / "tokenizer.json").is_file()
    theirs = transformers.AutoTokenizer.from_pretrained(str(export))
    ours = blockspec.load_tokenizer(trained / CHECKPOINTS[name])
    for text in TEXTS:
        ids = ours.encode(text)
        assert theirs.encode(text) == ids, text
        assert theirs.decode(ids) == text
    assert blockspec.load_tokenizer(export).encode(TEXTS[1]) == ours.encode(TEXTS[1])


def test_the_command_lists_the_tokenizer_files_it_wrote(trained, capsys, tmp_path):
    capsys.readouterr()
    assert main(["export-hf", str(trained / "training"), "--out", str(tmp_path / "out"), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["files"] == sorted(p.name for p in (tmp_path / "out").iterdir())
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(found["files"])


def test_an_export_without_a_tokenizer_writes_none(trained, tmp_path, registry):
    model = blockspec.build(trained / "bpe.toml", registry=registry, seed=0)
    blockspec.save(model, tmp_path / "bare")
    cli("export-hf", tmp_path / "bare", "--out", tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["config.json", "model.safetensors"]


def test_an_imported_models_own_tokenizer_files_go_back_unchanged(trained, tmp_path):
    """What a model carries from Hugging Face is its tokenizer already: written back as it came."""
    carried = {"tokenizer.json": (trained / "tok" / "tokenizer.json").read_bytes(),
               "tokenizer_config.json": b'{"model_max_length": 16}'}
    for file, data in carried.items():
        (tmp_path / "given").mkdir(exist_ok=True)
        (tmp_path / "given" / file).write_bytes(data)
    for file in ("config.json", "model.safetensors"):
        (tmp_path / "given" / file).write_bytes((trained / "bpe-hf" / file).read_bytes())
    cli("import-hf", tmp_path / "given", "--out", tmp_path / "imported")
    cli("export-hf", tmp_path / "imported", "--out", tmp_path / "out")
    for file, data in carried.items():
        assert (tmp_path / "out" / file).read_bytes() == data


def test_generate_takes_a_hugging_face_folder_with_its_tokenizer(trained, capsys):
    """As train, trace and show do: the folder's tokenizer.json encodes the prompt."""
    argv = ["--prompt", "the lord", "--max-new-tokens", "3", "--temperature", "0", "--json"]
    capsys.readouterr()
    assert main(["generate", str(trained / "bpe-hf"), *argv]) == 0
    from_folder = json.loads(capsys.readouterr().out)
    assert main(["generate", str(trained / "training"), *argv]) == 0
    from_checkpoint = json.loads(capsys.readouterr().out)
    assert from_folder["ids"] == from_checkpoint["ids"] and from_folder["text"] == from_checkpoint["text"]


def test_check_names_a_folder_it_cannot_read_once(tmp_path, capsys):
    folder = tmp_path / "adir"
    folder.mkdir()
    capsys.readouterr()
    assert main(["check", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count(str(folder)) == 1, err
    assert "neither a blockspec checkpoint (manifest.json) nor a Hugging Face model (config.json)" in err
    assert main(["check", str(folder), "--json"]) == 2
    [report] = json.loads(capsys.readouterr().out)
    assert report["problems"][0]["file"] == str(folder)
    assert str(folder) not in report["problems"][0]["message"]


def test_check_of_a_missing_file_names_it_once(tmp_path, capsys):
    capsys.readouterr()
    assert main(["check", str(tmp_path / "nothing.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("nothing.toml") == 1 and "No such file or directory" in err, err


def test_a_bpe_export_names_its_end_of_text_token_for_transformers(trained):
    """``tokenizer train``'s default ``<|endoftext|>`` keeps its role through the export: generation stops on it."""
    transformers = pytest.importorskip("transformers")
    theirs = transformers.AutoTokenizer.from_pretrained(str(trained / "bpe-hf"))
    ours = blockspec.load_tokenizer(trained / "training")
    assert theirs.eos_token == "<|endoftext|>"
    assert theirs.eos_token_id == ours.special_tokens["<|endoftext|>"]
