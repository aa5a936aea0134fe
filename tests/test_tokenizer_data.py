"""`blockspec tokenizer train`, `blockspec data prepare` and `blockspec train --data DIR`, end to end, tiny."""

from __future__ import annotations

import json

import numpy as np
import pytest

from blockspec.cli import main
from blockspec.data.dataset import CharDataset
from blockspec.data.prepared import PreparedDataset, prepare
from blockspec.sources import tokenizer_at
from blockspec.data.textfiles import chunks
from blockspec.data.tokenizer import train_bpe

from .corpus import small_play
from .specs import spec_text

pytest.importorskip("tokenizers")

VOCAB = 300
FAST = ["--batch-size", "4", "--eval-batches", "2", "--eval-every", "3", "--lr", "1e-2"]


def tiny_spec(vocab_size: int) -> str:
    return spec_text(name="bpe-micro", vocab_size=vocab_size, context_length=16, d_model=16, n_layers=1, n_heads=2,
                     d_ff=32)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A 300-token BPE learnt from a few KB of play, and that play prepared with it."""
    root = tmp_path_factory.mktemp("bpe")
    (root / "play.txt").write_text(small_play(200))
    (root / "spec.toml").write_text(tiny_spec(VOCAB))
    assert main(["tokenizer", "train", str(root / "play.txt"), "--vocab-size", str(VOCAB), "--out",
                 str(root / "tok")]) == 0
    assert main(["data", "prepare", str(root / "play.txt"), "--tokenizer", str(root / "tok"), "--out",
                 str(root / "data"), "--quiet"]) == 0
    return root


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_prepared_data_decodes_back_to_the_text(prepared):
    data = PreparedDataset(prepared / "data")
    meta = json.loads((prepared / "data" / "meta.json").read_text())
    assert meta["vocab_size"] == VOCAB and meta["dtype"] == "uint16" and meta["sources"] == ["play.txt"]
    assert meta["tokens"]["val"] == sum(meta["tokens"].values()) - int(sum(meta["tokens"].values()) * 0.9)
    ids = np.concatenate([data.splits["train"], data.splits["val"]]).tolist()
    assert data.tokenizer.decode(ids) == (prepared / "play.txt").read_text()


def test_char_prepared_batches_equal_the_text_files_batches(prepared, tmp_path):
    prepare([prepared / "play.txt"], None, tmp_path / "chars")
    text = CharDataset.from_file(prepared / "play.txt")
    data = PreparedDataset(tmp_path / "chars")
    for split in ("train", "val"):
        assert data.batch(split, size=3, length=8, seed=5)[0].tolist() == \
            text.batch(split, size=3, length=8, seed=5)[0].tolist()


def test_chunks_are_bounded_and_rejoin_to_the_text(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text("é" * 5000 + "\nline\n" * 300)
    pieces = list(chunks(path, size=1000))
    assert "".join(pieces) == path.read_text() and max(len(p.encode()) for p in pieces) <= 3000


def test_train_on_prepared_data_resumes_and_generates_with_its_bpe(prepared, capsys):
    spec, data = str(prepared / "spec.toml"), str(prepared / "data")
    assert main(["train", spec, "--data", data, *FAST, "--steps", "6", "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    ckpt = str(prepared / "ckpt")
    assert main(["train", spec, "--data", data, *FAST, "--steps", "3", "--out", ckpt, "--quiet"]) == 0
    capsys.readouterr()
    assert main(["train", spec, "--data", data, *FAST, "--steps", "6", "--resume", ckpt, "--json"]) == 0
    resumed = json.loads(capsys.readouterr().out)
    assert resumed["val_loss"] == whole["val_loss"]
    assert main(["generate", ckpt, "--prompt", "ROMEO:", "--max-new-tokens", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["text"].startswith("ROMEO:")
    meta = prepare([prepared / "play.txt"], tokenizer_at(ckpt), prepared / "again")  # the checkpoint's BPE
    assert meta["tokenizer_sha256"] == PreparedDataset(prepared / "data").meta.tokenizer_sha256


def test_vocabulary_too_small_is_refused_with_the_number(prepared, tmp_path, capsys):
    (tmp_path / "small.toml").write_text(tiny_spec(VOCAB - 1))
    assert main(["train", str(tmp_path / "small.toml"), "--data", str(prepared / "data"), "--steps", "1"]) == 2
    assert f"set vocab_size = {VOCAB}" in error_line(capsys)


def test_a_tokenizer_that_does_not_match_meta_json_is_refused(prepared, tmp_path, capsys):
    copy = tmp_path / "data"
    assert main(["data", "prepare", str(prepared / "play.txt"), "--tokenizer", str(prepared / "tok"), "--out",
                 str(copy), "--quiet"]) == 0
    other = train_bpe(iter([small_play(100, seed=1)]), VOCAB + 10)
    (copy / "tokenizer.json").write_bytes(other.data)
    assert main(["train", str(prepared / "spec.toml"), "--data", str(copy), "--steps", "1"]) == 2
    assert "sha256 differs" in error_line(capsys)


def test_a_checkpoint_trained_on_other_tokens_is_refused(prepared, tmp_path, capsys):
    (tmp_path / "chars.toml").write_text(tiny_spec(VOCAB))
    ckpt = str(tmp_path / "ckpt")
    assert main(["train", str(tmp_path / "chars.toml"), "--data", str(prepared / "play.txt"), *FAST, "--steps", "1",
                 "--out", ckpt, "--quiet"]) == 0
    assert main(["train", ckpt, "--data", str(prepared / "data"), "--steps", "2", "--out",
                 str(tmp_path / "tuned")]) == 2
    assert "another tokenizer" in error_line(capsys)


@pytest.mark.parametrize("content, expected", [(b"", "is empty"), (b"abc\xff\n", "is not UTF-8 text: byte 3")])
@pytest.mark.parametrize("command", ["tokenizer", "data"])
def test_bad_text_files_get_one_line(prepared, tmp_path, capsys, content, expected, command):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(content)
    args = (["tokenizer", "train", str(bad), "--vocab-size", "300"] if command == "tokenizer"
            else ["data", "prepare", str(bad), "--tokenizer", str(prepared / "tok")])
    assert main([*args, "--out", str(tmp_path / "out")]) == 2
    assert expected in error_line(capsys) and not (tmp_path / "out").exists()


def test_outputs_are_refused_without_force(prepared, capsys):
    assert main(["tokenizer", "train", str(prepared / "play.txt"), "--vocab-size", "300", "--out",
                 str(prepared / "tok")]) == 2
    assert "pass --force" in error_line(capsys)
    assert main(["data", "prepare", str(prepared / "play.txt"), "--tokenizer", "char", "--out",
                 str(prepared / "data")]) == 2
    assert "pass --force" in error_line(capsys)


def test_too_small_a_bpe_and_a_missing_tokenizer_get_one_line(prepared, tmp_path, capsys):
    assert main(["tokenizer", "train", str(prepared / "play.txt"), "--vocab-size", "100", "--out",
                 str(tmp_path / "t")]) == 2
    assert "at least 257" in error_line(capsys)  # 256 bytes and the end-of-text token
    (tmp_path / "empty").mkdir()
    assert main(["data", "prepare", str(prepared / "play.txt"), "--tokenizer", str(tmp_path / "empty"), "--out",
                 str(tmp_path / "d")]) == 2
    assert "expected a directory holding tokenizer.json" in error_line(capsys)


def test_without_the_tokenizers_package_one_line_says_what_to_install(prepared, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "tokenizers", None)  # import tokenizers now fails
    assert main(["tokenizer", "train", str(prepared / "play.txt"), "--vocab-size", "300", "--out",
                 str(tmp_path / "t")]) == 2
    assert "pip install 'blockspec[hf]'" in error_line(capsys)
