"""`sweep` takes the trainer's settings, from the one definition `train` uses."""

from __future__ import annotations

import json

import pytest

from blockspec.cli import main, make_parser

from .corpus import small_play
from .specs import spec_text

TRAINING = ["--steps", "--batch-size", "--lr", "--weight-decay", "--warmup", "--min-lr", "--grad-accum",
            "--precision", "--compile", "--eval-every", "--eval-batches", "--checkpoint-every", "--threads"]


def options(command: str) -> dict[str, object]:
    """Flag -> its argparse action, for one subcommand."""
    subparsers = next(a for a in make_parser()._actions if a.dest == "command" or a.choices)
    parser = subparsers.choices[command]
    return {flag: action for action in parser._actions for flag in action.option_strings}


def test_sweep_has_every_training_flag_of_train_spelled_alike():
    train, sweep = options("train"), options("sweep")
    for flag in TRAINING:
        assert flag in sweep, flag
        mine, theirs = sweep[flag], train[flag]
        assert (mine.type, mine.choices, mine.default, mine.help) == (theirs.type, theirs.choices, theirs.default,
                                                                       theirs.help), flag


def test_each_sweep_run_trains_with_the_trainers_settings(tmp_path):
    spec, data = tmp_path / "tiny.toml", tmp_path / "play.txt"
    spec.write_text(spec_text(name="tiny", vocab_size=65, context_length=16, d_model=16, n_layers=1, n_heads=2,
                              d_ff=32))
    data.write_text(small_play(200))
    assert main(["sweep", str(spec), "--data", str(data), "--vary", "norm.use=layernorm", "--out",
                 str(tmp_path / "out"), "--steps", "2", "--batch-size", "4", "--eval-batches", "1",
                 "--precision", "bf16-mixed", "--grad-accum", "2", "--threads", "1", "--device", "cpu"]) == 0
    [run] = (tmp_path / "out" / "runs").iterdir()
    config = json.loads((run / "training.json").read_text())["config"]
    assert (config["precision"], config["grad_accum"], config["compile"]) == ("bf16-mixed", 2, False)


@pytest.mark.parametrize("flag, value", [("--grad-accum", "3")])
def test_a_bad_trainer_setting_is_said_with_the_sweeps_flag(tmp_path, capsys, flag, value):
    spec, data = tmp_path / "tiny.toml", tmp_path / "play.txt"
    spec.write_text(spec_text(name="tiny", vocab_size=65, context_length=16, d_model=16, n_layers=1, n_heads=2,
                              d_ff=32))
    data.write_text(small_play(200))
    assert main(["sweep", str(spec), "--data", str(data), "--out", str(tmp_path / "out"), "--batch-size", "4",
                 flag, value, "--device", "cpu"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "--grad-accum: expected a divisor of --batch-size (4), found 3" in line, line
    assert not (tmp_path / "out").exists()
