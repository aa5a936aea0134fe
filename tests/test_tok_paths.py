"""Paths as users give them: a file given twice, a tokenizer's own file, a missing path, an empty or short text."""

from __future__ import annotations

import json
import os

import pytest

from blockspec.cli import main
from blockspec.data.dataset import CharDataset, DataError
from blockspec.data.prepared import PreparedDataset
from blockspec.data.tokenizer import train_bpe

from .corpus import small_play
from .specs import spec_text

tokenizers = pytest.importorskip("tokenizers")

CONTEXT = 16


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A working directory with a play, a spec and a trained tokenizer, as a user's would be."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text(small_play(120))
    (tmp_path / "spec.toml").write_text(spec_text(name="micro", vocab_size=300, context_length=CONTEXT, d_model=16,
                                                  n_layers=1, n_heads=2, d_ff=32))
    assert main(["tokenizer", "train", "a.txt", "--vocab-size", "300", "--out", "tok"]) == 0
    return tmp_path


def same_file_cases(folder) -> dict[str, list[str]]:
    os.symlink("a.txt", folder / "link.txt")
    return {"twice": ["a.txt", "a.txt"], "spelt twice": ["a.txt", "./a.txt"], "a link": ["a.txt", "link.txt"],
            "absolute": [str(folder / "a.txt"), "a.txt"]}


@pytest.mark.parametrize("command", ["data prepare", "tokenizer train"])
def test_the_same_file_given_twice_is_refused(folder, capsys, command):
    capsys.readouterr()
    for name, files in same_file_cases(folder).items():
        args = (["data", "prepare", *files, "--tokenizer", "tok"] if command == "data prepare"
                else ["tokenizer", "train", *files, "--vocab-size", "300"])
        assert main([*args, "--out", "out"]) == 2, name
        line = error_line(capsys)
        assert f"{files[1]}: is the same file as {files[0]}" in line and "once" in line, (name, line)
        assert not (folder / "out").exists()


@pytest.mark.parametrize("given", ["tok", "tok/tokenizer.json", "./tok/tokenizer.json"])
def test_a_tokenizer_directory_or_its_file_is_accepted(folder, capsys, given):
    assert main(["data", "prepare", "a.txt", "--tokenizer", given, "--out", "d", "--quiet", "--json"]) == 0
    meta = json.loads(capsys.readouterr().out)
    expected = train_bpe(iter([(folder / "a.txt").read_text()]), 300, special=("<|endoftext|>",))
    assert meta["vocab_size"] == 300 and meta["tokenizer_sha256"] == expected.sha256


def test_a_checkpoints_tokenizer_json_is_its_checkpoints_tokenizer(folder, capsys):
    assert main(["data", "prepare", "a.txt", "--tokenizer", "tok", "--out", "d", "--quiet"]) == 0
    assert main(["train", "spec.toml", "--data", "d", "--steps", "1", "--batch-size", "2", "--eval-batches", "1",
                 "--out", "ck", "--quiet"]) == 0
    assert main(["data", "prepare", "a.txt", "--tokenizer", "ck/tokenizer.json", "--out", "d2", "--quiet"]) == 0
    assert PreparedDataset("d2").meta.tokenizer_sha256 == PreparedDataset("d").meta.tokenizer_sha256


@pytest.mark.parametrize("given, expected", [
    ("nothere", "nothere: does not exist"), ("nothere/tokenizer.json", "nothere/tokenizer.json: does not exist"),
    ("a.txt", "a.txt: is a file, not a tokenizer.json"), ("empty", "empty: is a directory without tokenizer.json")])
def test_a_tokenizer_that_is_not_there_says_what_is_there(folder, capsys, given, expected):
    (folder / "empty").mkdir()
    assert main(["data", "prepare", "a.txt", "--tokenizer", given, "--out", "d"]) == 2
    line = error_line(capsys)
    assert line.startswith(f"blockspec: error: {expected}") and "no such directory" not in line, line


def train_args(data: str, *, command: str = "train") -> list[str]:
    settings = ["--steps", "1", "--batch-size", "2", "--eval-batches", "1"]
    if command == "sweep":
        return ["sweep", "spec.toml", "--data", data, "--vary", "positional.use=learned,sinusoidal", "--out", "sw",
                *settings]
    return ["train", "spec.toml", "--data", data, *settings]


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_an_empty_text_is_named_empty(folder, capsys, command):
    (folder / "empty.txt").write_text("")
    assert main(train_args("empty.txt", command=command)) == 2
    assert error_line(capsys) == "blockspec: error: empty.txt: is empty; expected UTF-8 text to train on"


def test_an_empty_text_is_named_empty_with_a_checkpoints_tokenizer_too(folder, capsys):
    assert main(["train", "spec.toml", "--data", "a.txt", "--steps", "1", "--batch-size", "2", "--eval-batches", "1",
                 "--out", "ck", "--quiet"]) == 0
    (folder / "empty.txt").write_text("")
    assert main(["train", "ck", "--data", "empty.txt", "--steps", "1", "--out", "tuned"]) == 2
    assert "empty.txt: is empty" in error_line(capsys)


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_a_text_too_short_for_one_window_says_how_long_it_is_and_must_be(folder, capsys, command):
    (folder / "short.txt").write_text("ROMEO: good night\n")  # 18 characters
    assert main(train_args("short.txt", command=command)) == 2
    line = error_line(capsys)
    needed = 161  # each split, the validation tenth too, must hold one window of 17: 144 + 17
    assert f"short.txt: holds 18 characters; one window of $.model.context_length = {CONTEXT} needs" in line
    assert f"at least {needed} characters" in line, line


def test_the_shortest_text_that_trains_is_the_length_the_message_names(folder):
    CharDataset.from_text("a" * 161, source="t").check_fits(65, CONTEXT)  # 144 train and 17 validation
    with pytest.raises(DataError, match="holds 160 characters.*at least 161 characters"):
        CharDataset.from_text("a" * 160, source="t").check_fits(65, CONTEXT)


def test_a_text_in_a_checkpoints_subwords_counts_tokens_not_characters(folder):
    bpe = train_bpe(iter([small_play(40)]), 300)
    text = "the lord the"
    with pytest.raises(DataError, match=f"holds {len(bpe.encode(text))} tokens"):
        CharDataset.from_text(text, bpe, source="t").check_fits(300, CONTEXT)


def test_a_prepared_dataset_too_short_says_its_tokens(folder, capsys):
    (folder / "short.txt").write_text("ROMEO: good night\n")
    assert main(["data", "prepare", "short.txt", "--tokenizer", "tok", "--out", "d", "--quiet"]) == 0
    assert main(train_args("d")) == 2
    line = error_line(capsys)
    assert "d: holds" in line and "tokens" in line and "at least 161 tokens" in line
