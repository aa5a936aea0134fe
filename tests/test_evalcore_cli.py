"""``blockspec eval``: its report and --json, and each bad input refused in one line with exit 2."""

from __future__ import annotations

import json

import pytest

import blockspec
from blockspec.data.tokenizer import CharTokenizer, tokenizer_bytes

from .weights_helpers import GPT2_TEXT
from .cli_run import run as run_command

SPEC = GPT2_TEXT.format(tied="true")  # context_length 32
TEXT = "the quick brown fox jumps over the lazy dog\n" * 8


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, registry):
    """A checkpoint that carries a character tokenizer, one that carries none, and the spec they share."""
    root = tmp_path_factory.mktemp("eval")
    (root / "spec.toml").write_text(SPEC, encoding="utf-8")
    model = blockspec.build(blockspec.loads_spec(SPEC, registry=registry), registry=registry, seed=0)
    own = {"tokenizer.json": tokenizer_bytes(CharTokenizer.from_text(TEXT))}
    with_tokenizer = blockspec.save(model, root / "with", extra_files=own)
    without = blockspec.save(model, root / "without")
    (root / "text.txt").write_text(TEXT, encoding="utf-8")
    return root, with_tokenizer, without


def run(capsys, *argv) -> tuple[int, str, str]:
    return run_command(capsys, "eval", *argv)


def test_json_report_gives_every_figure_and_the_same_figure_twice(checkpoints, capsys):
    root, ckpt, _ = checkpoints
    reports = []
    for _ in range(2):
        code, out, err = run(capsys, ckpt, "--data", root / "text.txt", "--stride", "4", "--json")
        assert code == 0 and err == ""
        reports.append(json.loads(out))
    assert reports[0] == reports[1]
    report = reports[0]
    assert (report["tokens"], report["bytes"], report["context"], report["stride"]) == (len(TEXT) - 1, len(TEXT), 32, 4)
    assert report["bits_per_byte"] > 0 and report["perplexity"] > 1


def test_text_report_names_the_figures(checkpoints, capsys):
    root, ckpt, _ = checkpoints
    code, out, _ = run(capsys, ckpt, "--data", root / "text.txt", "--quiet")
    assert code == 0
    assert "bits per byte" in out and "perplexity" in out and "stride 16" in out


def test_a_tokenizer_can_be_given_for_a_source_without_one(checkpoints, capsys):
    root, with_tokenizer, without = checkpoints
    code, out, _ = run(capsys, without, "--data", root / "text.txt", "--tokenizer", with_tokenizer, "--json")
    assert code == 0 and json.loads(out)["tokens"] == len(TEXT) - 1


@pytest.mark.parametrize("case, flags, said", [
    ("empty", ["--data", "{empty}"], "is empty"),
    ("not utf-8", ["--data", "{latin}"], "is not UTF-8"),
    ("no tokenizer", ["--data", "{text}", "--source", "{without}"], "--tokenizer"),
    ("context too long", ["--data", "{text}", "--context", "33"], "--context: expected a whole number of tokens from 1"),
    ("stride past context", ["--data", "{text}", "--context", "8", "--stride", "9"], "--stride: expected"),
    ("stride below 1", ["--data", "{text}", "--stride", "0"], "--stride"),
    ("a spec without weights", ["--data", "{text}", "--source", "{spec}"], "holds no weights"),
])
def test_bad_input_is_one_line_and_exit_2(checkpoints, capsys, tmp_path, case, flags, said):
    root, ckpt, without = checkpoints
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "latin.txt").write_bytes("café\n".encode("latin-1"))
    places = {"empty": tmp_path / "empty.txt", "latin": tmp_path / "latin.txt", "text": root / "text.txt",
              "without": without, "spec": root / "spec.toml"}
    argv = [flag.format(**places) for flag in flags]
    source = ckpt
    if "--source" in argv:
        at = argv.index("--source")
        source = argv[at + 1]
        del argv[at:at + 2]
    code, out, err = run(capsys, source, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and said in err, err
