"""Sweeps that grow: more seeds, values or steps in the same --out reuse every unchanged run and train only
what is new; a changed base is refused unless --force, which retrains what changed and removes nothing else."""

from __future__ import annotations

import csv
import json

from blockspec.cli import main

from .specs import spec_text

FAST = ["--batch-size", "4", "--eval-batches", "1", "--eval-every", "2", "--device", "cpu"]
TINY = dict(name="tiny", vocab_size=65, context_length=16, d_model=16, n_layers=1, n_heads=2, d_ff=32)


def sweep(inputs, out, *extra: str, values="learned", seeds="0", steps="2") -> int:
    spec, data = inputs
    return main(["sweep", str(spec), "--data", str(data), "--vary", f"positional.use={values}", "--seeds", seeds,
                 "--steps", steps, "--out", str(out), *FAST, *extra])


def snapshot(out) -> dict[str, bytes]:
    """Each run's training.json, by run: a reused run's is the same bytes."""
    return {run.name: (run / "training.json").read_bytes() for run in (out / "runs").iterdir()}


def rows(out) -> list[dict[str, str]]:
    return list(csv.DictReader((out / "results.csv").open()))


def test_more_seeds_train_only_the_new_ones(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    assert sweep(inputs, out, values="learned,sinusoidal") == 0
    before = snapshot(out)
    capsys.readouterr()
    assert sweep(inputs, out, values="learned,sinusoidal", seeds="0,1") == 0
    text = capsys.readouterr().out
    assert text.count("already done") == 2 and text.count("tok/s)") == 2, text
    after = snapshot(out)
    assert len(after) == 4 and all(after[name] == data for name, data in before.items())
    assert [r["seeds"] for r in rows(out)] == ["2", "2"]


def test_more_values_train_only_the_new_variant(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    assert sweep(inputs, out) == 0
    before = snapshot(out)
    capsys.readouterr()
    assert sweep(inputs, out, values="learned,sinusoidal") == 0
    assert capsys.readouterr().out.count("already done") == 1
    after = snapshot(out)
    assert len(after) == 2 and all(after[name] == data for name, data in before.items())
    assert [r["positional.use"] for r in rows(out)] == ["learned", "sinusoidal"]


def test_more_steps_continue_each_run_to_exactly_the_longer_run(inputs, tmp_path, capsys):
    out, whole = tmp_path / "out", tmp_path / "whole"
    assert sweep(inputs, out, steps="2") == 0
    capsys.readouterr()
    assert sweep(inputs, out, steps="4") == 0
    assert "continued from step 2" in capsys.readouterr().out
    assert sweep(inputs, whole, steps="4") == 0
    [grown], [fresh] = (json.loads(data) for data in snapshot(out).values()), snapshot(whole).values()
    fresh = json.loads(fresh)
    assert grown["step"] == 4 and grown["history"]["train"] == fresh["history"]["train"]
    assert grown["history"]["evals"][-1] == fresh["history"]["evals"][-1]


def test_fewer_steps_than_a_finished_run_are_refused_naming_both(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    assert sweep(inputs, out, steps="4") == 0
    before = snapshot(out)
    capsys.readouterr()
    assert sweep(inputs, out, steps="2") == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "--steps: expected a total of at least 4 steps (the run is at step 4), found 2" in line, line
    assert "pass --steps 4 or more" in line and "--force" in line, line
    assert snapshot(out) == before
    assert sweep(inputs, out, "--force", steps="2") == 0
    assert [json.loads(d)["step"] for d in snapshot(out).values()] == [2]


def test_a_changed_base_spec_is_refused_and_force_retrains_keeping_the_folders_other_content(inputs, tmp_path,
                                                                                             capsys):
    spec, _ = inputs
    out = tmp_path / "out"
    assert sweep(inputs, out, values="learned,sinusoidal") == 0
    (out / "notes.md").write_text("mine")
    before = snapshot(out)
    spec.write_text(spec_text(**{**TINY, "d_ff": 48}))
    capsys.readouterr()
    assert sweep(inputs, out, values="learned,sinusoidal") == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "holds a sweep of another base (the base spec differ)" in line and "--force" in line, line
    assert snapshot(out) == before
    assert sweep(inputs, out, "--force", values="learned") == 0
    after = snapshot(out)
    assert after.keys() == before.keys()  # the learned run retrained in place, the sinusoidal one kept as it was
    [learned] = [name for name in after if "learned" in name]
    [other] = [name for name in after if "sinusoidal" in name]
    assert after[learned] != before[learned] and after[other] == before[other]
    assert (out / "notes.md").read_text() == "mine"
    assert [r["positional.use"] for r in rows(out)] == ["learned"]


def test_changed_results_settings_are_refused_but_how_runs_execute_may_change(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    assert sweep(inputs, out) == 0
    capsys.readouterr()
    assert sweep(inputs, out, "--lr", "1e-2") == 2
    assert "(--lr differ)" in capsys.readouterr().err
    assert sweep(inputs, out, "--grad-accum", "2", "--checkpoint-every", "1", "--threads", "1", seeds="0,1") == 0
    assert capsys.readouterr().out.count("already done") == 1


def test_a_decaying_learning_rate_is_not_stretched_silently(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    assert sweep(inputs, out, "--min-lr", "1e-4", steps="2") == 0
    capsys.readouterr()
    assert sweep(inputs, out, "--min-lr", "1e-4", steps="4") == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "the run's learning rate decays over 2 steps (--min-lr)" in line and "--force" in line, line
    assert sweep(inputs, out, "--min-lr", "1e-4", "--force", steps="4") == 0
    assert [json.loads(d)["step"] for d in snapshot(out).values()] == [4]


def test_a_version_one_sweep_folder_still_resumes(inputs, tmp_path, capsys):
    """A folder written before runs were recorded one by one: its runs are read back, not trained again."""
    out = tmp_path / "out"
    assert sweep(inputs, out, values="learned,sinusoidal") == 0
    plan = json.loads((out / "sweep.json").read_text())
    old = {"format": plan["format"], "version": 1, "spec": plan["spec"], "spec_file": plan["spec_file"],
           "data": str(inputs[1]), "vary": plan["vary"], "seeds": plan["seeds"],
           "settings": {**plan["settings"], "steps": 2, "grad_accum": 1, "compile": False}}
    (out / "sweep.json").write_text(json.dumps(old))
    before = snapshot(out)
    capsys.readouterr()
    assert sweep(inputs, out, values="learned,sinusoidal", seeds="0,1") == 0
    assert capsys.readouterr().out.count("already done") == 2
    assert all(snapshot(out)[name] == data for name, data in before.items())
