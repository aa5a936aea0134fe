"""examples/ablate_positional.py over several seeds: each seed is the run `--seed S` gives, and the
summary is their mean ± sample standard deviation (the figures README.md and docs/training.md quote)."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import pytest

from .corpus import small_play

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ablation():
    spec = importlib.util.spec_from_file_location("ablate_positional", ROOT / "examples" / "ablate_positional.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def play(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ablation") / "play.txt"
    path.write_text(small_play(), encoding="utf-8")
    return path


def run(ablation, monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["ablate_positional.py", *argv])
    code = ablation.main()
    out, err = capsys.readouterr()
    return code, out, err


QUICK = ("--steps", "2", "--eval-every", "2", "--batch-size", "4")


def test_several_seeds_are_the_single_seed_runs_with_their_spread(ablation, play, monkeypatch, capsys):
    code, out, _ = run(ablation, monkeypatch, capsys, "--data", str(play), *QUICK, "--seeds", "0,1", "--json")
    assert code == 0
    both = json.loads(out)
    singles = [json.loads(run(ablation, monkeypatch, capsys, "--data", str(play), *QUICK, "--seed", s, "--json")[1])
               for s in ("0", "1")]
    for name in ("learned", "sinusoidal"):
        per_seed = [single[name]["val_loss"]["runs"][0] for single in singles]
        assert both[name]["val_loss"]["runs"] == per_seed
        assert both[name]["val_loss"]["mean"] == pytest.approx(statistics.fmean(per_seed))
        assert both[name]["val_loss"]["std"] == pytest.approx(statistics.stdev(per_seed))
        assert singles[0][name]["val_loss"]["std"] == 0.0
    gaps = [a - b for a, b in zip(both["learned"]["val_loss"]["runs"], both["sinusoidal"]["val_loss"]["runs"])]
    assert both["val_loss_difference"]["mean"] == pytest.approx(statistics.fmean(gaps))
    assert both["parameter_difference"] == 4096 and both["seeds"] == [0, 1]


def test_the_table_shows_mean_and_spread_per_variant(ablation, play, monkeypatch, capsys):
    code, out, _ = run(ablation, monkeypatch, capsys, "--data", str(play), *QUICK, "--seeds", "0,1")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["positions", "parameters", "seeds", "train", "loss", "val", "loss"]
    assert lines[1].startswith("learned") and lines[1].count("±") == 2 and " 2 " in lines[1]
    assert any(line.startswith("learned - sinusoidal, val loss, paired over seeds: ") for line in lines)


def test_a_seed_given_twice_is_refused(ablation, play, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exited:
        run(ablation, monkeypatch, capsys, "--data", str(play), *QUICK, "--seeds", "0,0")
    assert exited.value.code == 2
    assert "a seed given twice in '0,0'" in capsys.readouterr().err
