"""A sweep's results in bits per byte: the val_bpb columns, and a folder whose runs predate them."""

from __future__ import annotations

import csv
import json
import statistics

import attrs
import pytest

import blockspec
from blockspec.cli import main
from blockspec.train.checkpointing import load_checkpoint, save_checkpoint

from .corpus import small_play
from .specs import spec_text

pytestmark = pytest.mark.usefixtures("one_thread")

FAST = ["--steps", "2", "--batch-size", "4", "--eval-batches", "2", "--device", "cpu", "--seeds", "0,1",
        "--vary", "positional.use=learned,sinusoidal"]
TEXT = small_play(200).replace("e", "é")  # two bytes for each 'é': bits per byte is not bits per character


@pytest.fixture
def inputs(tmp_path):
    spec, data = tmp_path / "tiny.toml", tmp_path / "play.txt"
    spec.write_text(spec_text(name="tiny", vocab_size=65, context_length=16, d_model=16, n_layers=1, n_heads=2,
                              d_ff=32))
    data.write_text(TEXT, encoding="utf-8")
    return spec, data


def sweep(spec, data, out) -> int:
    return main(["sweep", str(spec), "--data", str(data), "--out", str(out), *FAST])


def last_bits(out) -> dict[str, list[float]]:
    """positional.use -> each seed's final val_bpb, as its checkpoint recorded it."""
    bits: dict[str, list[float]] = {}
    for run in sorted((out / "runs").iterdir()):
        evals = json.loads((run / "training.json").read_text())["history"]["evals"]
        bits.setdefault(run.name.split("-")[2], []).append(evals[-1]["val_bpb"])
    return bits


def test_results_gain_the_bits_per_byte_columns(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    assert sweep(*inputs, out) == 0
    assert "bits/byte)" in capsys.readouterr().out
    rows = {r["positional.use"]: r for r in csv.DictReader((out / "results.csv").open())}
    for value, seeds in last_bits(out).items():
        assert float(rows[value]["val_bpb_mean"]) == pytest.approx(statistics.fmean(seeds))
        assert float(rows[value]["val_bpb_std"]) == pytest.approx(statistics.stdev(seeds))
        assert float(rows[value]["val_bpb_mean"]) < float(rows[value]["val_loss_mean"]) / 0.6931  # é: > 1 byte
    assert "val bits/byte" in (out / "results.md").read_text()


def test_a_folder_whose_runs_predate_bits_per_byte_still_reports_them(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    assert sweep(*inputs, out) == 0
    fresh = (out / "results.csv").read_text()
    registry = blockspec.load_registry()
    for run in (out / "runs").iterdir():  # rewrite each run as a checkpoint of before: no val_bpb in its history
        old = load_checkpoint(run, registry)
        history = {**old.training["history"],
                   "evals": [{k: v for k, v in e.items() if k != "val_bpb"} for e in old.training["history"]["evals"]]}
        save_checkpoint(run, attrs.evolve(old, training={**old.training, "history": history}), overwrite=True)
    (out / "results.csv").unlink()
    capsys.readouterr()
    assert sweep(*inputs, out) == 0
    assert capsys.readouterr().out.count("already done") == 4  # nothing retrained
    assert (out / "results.csv").read_text() == fresh  # the same figures, from each run's loss and the data
