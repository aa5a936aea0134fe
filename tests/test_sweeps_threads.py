"""One thread rule for `train` and `sweep`: a sweep run is the `train` run of the same settings, loss for loss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from blockspec.cli import main

from .corpus import small_play

SPEC = Path(__file__).resolve().parents[1] / "examples" / "specs" / "tiny-shakespeare.toml"
# batches of 64 windows of 64 characters: big enough that two threads sum in another order than one
# (on a 2-core CPU the losses part at step 5), small enough for a few seconds
SETTINGS = ["--steps", "6", "--batch-size", "64", "--eval-batches", "1", "--eval-every", "3", "--device", "cpu"]


@pytest.fixture
def two_threads(monkeypatch):
    """Start from torch's default on a multi-core machine (2 threads), and leave the process as it was."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def inputs(tmp_path):
    data = tmp_path / "play.txt"
    data.write_text(small_play(2000))
    return SPEC, data


def history(checkpoint) -> dict:
    return json.loads((checkpoint / "training.json").read_text())["history"]


def test_a_sweep_run_has_exactly_the_losses_of_train_with_the_same_settings(two_threads, inputs, tmp_path):
    spec, data = inputs
    assert main(["sweep", str(spec), "--data", str(data), "--vary", "norm.use=layernorm", "--seeds", "3",
                 "--out", str(tmp_path / "sweep"), *SETTINGS]) == 0
    assert torch.get_num_threads() == 2  # the rule holds for the run, not for the rest of the process
    assert main(["train", str(spec), "--data", str(data), "--seed", "3", "--out", str(tmp_path / "train"),
                 "--quiet", *SETTINGS]) == 0
    [run] = (tmp_path / "sweep" / "runs").iterdir()
    assert history(run) == history(tmp_path / "train")  # exactly: the same numbers, not close ones


def test_train_and_sweep_both_take_threads(two_threads, inputs, tmp_path):
    """--threads 2 asks for what the rule would not choose here: both commands run it, and agree."""
    spec, data = inputs
    assert main(["sweep", str(spec), "--data", str(data), "--seeds", "1", "--threads", "2",
                 "--out", str(tmp_path / "sweep"), *SETTINGS]) == 0
    assert main(["train", str(spec), "--data", str(data), "--seed", "1", "--threads", "2",
                 "--out", str(tmp_path / "train"), "--quiet", *SETTINGS]) == 0
    [run] = (tmp_path / "sweep" / "runs").iterdir()
    assert history(run) == history(tmp_path / "train")
