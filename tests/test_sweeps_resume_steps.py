"""A resume asked for fewer steps than its checkpoint has is refused: one line naming both numbers, exit 2."""

from __future__ import annotations

import json

import pytest

from blockspec.cli import main


FAST = ["--batch-size", "4", "--eval-batches", "1", "--eval-every", "0", "--device", "cpu", "--quiet"]


@pytest.fixture
def checkpoint(tmp_path, inputs):
    spec, data = inputs  # the shared micro spec and play (conftest)
    assert main(["train", str(spec), "--data", str(data), "--steps", "6", "--out", str(tmp_path / "ck"), *FAST]) == 0
    return tmp_path / "ck", data


def test_a_resume_below_the_checkpoints_step_is_refused_naming_both(checkpoint, capsys):
    ck, data = checkpoint
    before = (ck / "training.json").read_bytes()
    capsys.readouterr()
    assert main(["train", str(ck), "--resume", str(ck), "--data", str(data), "--steps", "4", *FAST]) == 2
    captured = capsys.readouterr()
    [line] = captured.err.splitlines()
    assert line.startswith(f"blockspec: error: {ck}: --steps: expected a total of at least 6 steps"), line
    assert "found 4" in line and "pass --steps 6" in line, line
    assert "done" not in captured.out
    assert (ck / "training.json").read_bytes() == before  # nothing trained, nothing saved


def test_a_resume_at_the_checkpoints_step_evaluates_it_as_it_is(checkpoint, capsys):
    ck, data = checkpoint
    assert main(["train", str(ck), "--resume", str(ck), "--data", str(data), "--steps", "6", *FAST]) == 0
    assert json.loads((ck / "training.json").read_text())["step"] == 6
