"""blockspec sweep: every combination times seeds, results right, resumable, refusals in one line."""

from __future__ import annotations

import csv
import json
import statistics

import pytest

from blockspec.cli import main

from .specs import spec_text

FAST = ["--steps", "3", "--batch-size", "4", "--eval-batches", "2", "--eval-every", "2", "--device", "cpu"]


def sweep(spec, data, out, *extra: str, vary=("positional.use=learned,sinusoidal",), seeds="0,1") -> int:
    flags = [item for v in vary for item in ("--vary", v)]
    return main(["sweep", str(spec), "--data", str(data), *flags, "--seeds", seeds, "--out", str(out), *FAST, *extra])


def final_losses(out):
    """(variant value, seed) -> (train, val) of the last evaluation, read from each run's checkpoint."""
    losses = {}
    for run in sorted((out / "runs").iterdir()):
        training = json.loads((run / "training.json").read_text())
        last = training["history"]["evals"][-1]
        losses[(run.name.split("-")[2], training["config"]["seed"])] = (last["train_loss"], last["val_loss"])
    return losses


def test_results_are_means_and_stds_over_seeds(inputs, tmp_path, capsys):
    spec, data = inputs
    out = tmp_path / "out"
    assert sweep(spec, data, out) == 0
    assert len(list((out / "runs").iterdir())) == 4
    losses = final_losses(out)
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [r["positional.use"] for r in rows] == ["learned", "sinusoidal"]
    for row in rows:
        name = row["positional.use"]
        train = [losses[(name, s)][0] for s in (0, 1)]
        val = [losses[(name, s)][1] for s in (0, 1)]
        assert float(row["train_loss_mean"]) == pytest.approx(statistics.fmean(train))
        assert float(row["train_loss_std"]) == pytest.approx(statistics.stdev(train))
        assert float(row["val_loss_mean"]) == pytest.approx(statistics.fmean(val))
        assert float(row["val_loss_std"]) == pytest.approx(statistics.stdev(val))
        assert int(row["seeds"]) == 2 and float(row["tokens_per_s"]) > 0
    assert int(rows[0]["parameters"]) > int(rows[1]["parameters"])  # a learned table has parameters
    markdown = (out / "results.md").read_text()
    assert "| learned |" in markdown and f"{float(rows[0]['val_loss_mean']):.4f} ± " in markdown


def test_same_seed_same_batches_across_variants(inputs, tmp_path):
    """Two runs of one variant differ by seed; the same seed repeats exactly (batches are (seed, step))."""
    spec, data = inputs
    assert sweep(spec, data, tmp_path / "a", vary=("norm.use=layernorm",), seeds="0") == 0
    assert sweep(spec, data, tmp_path / "b", vary=("norm.use=layernorm",), seeds="0") == 0
    assert final_losses(tmp_path / "a") == final_losses(tmp_path / "b")


def test_a_rerun_skips_finished_runs_and_continues_an_unfinished_one(inputs, tmp_path, capsys):
    spec, data = inputs
    out = tmp_path / "out"
    assert sweep(spec, data, out) == 0
    before = final_losses(out)
    unfinished = sorted((out / "runs").iterdir())[-1]
    import shutil
    shutil.rmtree(unfinished)  # as if interrupted before its checkpoint
    capsys.readouterr()
    assert sweep(spec, data, out) == 0
    text = capsys.readouterr().out
    assert text.count("already done") == 3
    assert final_losses(out) == before  # the retrained run is the same run


def test_an_interrupted_run_resumes_from_its_checkpoint(inputs, tmp_path, monkeypatch):
    import blockspec.train.sweep as sweep_module

    spec, data = inputs
    out = tmp_path / "out"
    real = sweep_module.train_run
    calls = []

    def interrupted(variant, seed, directory, data_, settings, **kwargs):
        calls.append(directory.name)
        if len(calls) == 2:  # the second run stops after its step-2 checkpoint
            real(variant, seed, directory, data_, {**settings, "steps": 2}, **kwargs)
            raise KeyboardInterrupt
        return real(variant, seed, directory, data_, settings, **kwargs)

    monkeypatch.setattr(sweep_module, "train_run", interrupted)
    assert sweep(spec, data, out, "--checkpoint-every", "1") == 130
    monkeypatch.setattr(sweep_module, "train_run", real)
    second = out / "runs" / calls[1]
    assert json.loads((second / "training.json").read_text())["step"] == 2
    assert sweep(spec, data, out, "--checkpoint-every", "1") == 0
    assert json.loads((second / "training.json").read_text())["step"] == 3
    assert sweep(spec, data, tmp_path / "whole", "--checkpoint-every", "1") == 0
    resumed, whole = final_losses(out), final_losses(tmp_path / "whole")
    assert resumed.keys() == whole.keys()
    for key in whole:
        assert resumed[key] == pytest.approx(whole[key], abs=1e-5)


@pytest.mark.parametrize("vary, expected", [
    ("nothing.use=rope", "the spec has no [nothing] table"),
    ("positional.usee=rope", "unknown key 'usee'"),
    ("positional.use=ropee", "did you mean 'rope'"),
    ("model.d_model=abc", "expected an integer"),
    ("positional", "expected KEY=V1,V2"),
    ("positional.use=rope,", "expected values separated by commas"),
])
def test_a_bad_vary_is_refused_in_one_line_before_training(inputs, tmp_path, capsys, vary, expected):
    spec, data = inputs
    assert sweep(spec, data, tmp_path / "out", vary=(vary,)) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "out").exists()


def test_a_folder_with_a_different_base_is_refused_unless_force(inputs, tmp_path, capsys):
    spec, data = inputs
    out = tmp_path / "out"
    assert sweep(spec, data, out, seeds="0") == 0
    capsys.readouterr()
    assert sweep(spec, data, out, "--lr", "1e-2", seeds="0") == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "holds a sweep of another base (--lr differ)" in err and "--force" in err
    assert sweep(spec, data, out, "--force", "--lr", "1e-2", seeds="0,1") == 0
    assert len(list((out / "runs").iterdir())) == 4


def test_a_folder_that_is_not_a_sweep_is_never_replaced(inputs, tmp_path, capsys):
    spec, data = inputs
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert sweep(spec, data, out, "--force") == 2
    assert "is not a sweep folder" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine"


@pytest.fixture
def bpe_checkpoint(inputs, tmp_path):
    """A training checkpoint whose tokenizer is a byte-level BPE one (300 tokens), trained on its own data."""
    pytest.importorskip("tokenizers")
    _, data = inputs
    spec = tmp_path / "bpe.toml"
    spec.write_text(spec_text(name="bpe", vocab_size=300, context_length=16, d_model=16, n_layers=1, n_heads=2,
                              d_ff=32))
    assert main(["tokenizer", "train", str(data), "--vocab-size", "300", "--out", str(tmp_path / "tok")]) == 0
    assert main(["data", "prepare", str(data), "--tokenizer", str(tmp_path / "tok"), "--out",
                 str(tmp_path / "bpe-data"), "--quiet"]) == 0
    assert main(["train", str(spec), "--data", str(tmp_path / "bpe-data"), *FAST[:6], "--out",
                 str(tmp_path / "ckpt"), "--quiet"]) == 0
    return tmp_path / "ckpt", (tmp_path / "tok" / "tokenizer.json").read_bytes()


def test_a_sweep_over_a_checkpoint_trains_with_its_tokenizer(inputs, bpe_checkpoint, tmp_path, capsys):
    """A text file is encoded with the checkpoint's BPE tokenizer, and each run keeps it (not the characters)."""
    from blockspec.train.checkpointing import load_checkpoint

    (checkpoint, bpe), (_, data) = bpe_checkpoint, inputs
    assert sweep(checkpoint, data, tmp_path / "out", vary=("norm.use=layernorm,rmsnorm",), seeds="0") == 0
    for run in sorted((tmp_path / "out" / "runs").iterdir()):
        assert getattr(load_checkpoint(run).tokenizer, "data", None) == bpe, run.name


def test_a_sweep_refuses_data_of_another_tokenizer_than_the_models(inputs, bpe_checkpoint, tmp_path, capsys):
    (checkpoint, _), (_, data) = bpe_checkpoint, inputs
    assert main(["data", "prepare", str(data), "--tokenizer", "char", "--out", str(tmp_path / "chars")]) == 0
    capsys.readouterr()
    assert sweep(checkpoint, tmp_path / "chars", tmp_path / "out", vary=("norm.use=layernorm",), seeds="0") == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "another tokenizer" in err and f"--tokenizer {checkpoint}" in err, err
    assert not (tmp_path / "out").exists()
