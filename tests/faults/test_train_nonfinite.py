"""Training that diverges stops at the first non-finite loss or gradient norm, and saves nothing over the last
good checkpoint; generation refuses non-finite weights and logits. Each case: one line, exit 2, outputs intact."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch

import blockspec
from blockspec.cli import main
from blockspec.data.dataset import CharDataset
from blockspec.train import run as training
from blockspec.train.loop import Trainer, TrainConfig

from ..corpus import small_play
from ..specs import spec_text

TEXT = small_play(200)
SPEC = spec_text(name="micro", vocab_size=len(set(TEXT)), context_length=16, d_model=16, n_layers=1, n_heads=2,
                 d_ff=32)
FAST = ["--batch-size", "4", "--eval-batches", "1", "--eval-every", "2", "--quiet"]


@pytest.fixture
def world(tmp_path, one_thread):
    """A spec, a text and a good checkpoint of 4 steps; the tests write only under ``out/``."""
    (tmp_path / "spec.toml").write_text(SPEC)
    (tmp_path / "play.txt").write_text(TEXT)
    assert main(["train", str(tmp_path / "spec.toml"), "--data", str(tmp_path / "play.txt"), "--steps", "4", *FAST,
                 "--out", str(tmp_path / "ckpt")]) == 0
    (tmp_path / "out").mkdir()
    return tmp_path


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a directory)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


def train(world: Path, *args: str) -> int:
    return main(["train", str(world / "ckpt"), "--data", str(world / "play.txt"), *FAST, *args])


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("blockspec: error: "), err
    return err


def test_a_huge_learning_rate_stops_at_the_first_nan_and_keeps_the_checkpoint(world, capsys):
    before = snapshot(world)
    capsys.readouterr()
    assert train(world, "--resume", str(world / "ckpt"), "--steps", "12", "--lr", "1e6") == 2
    err = one_error_line(capsys)
    assert "diverged at step" in err and "--lr" in err and "1e+06" in err, err
    assert "nothing was saved" in err and str(world / "ckpt") in err, err
    assert snapshot(world) == before  # the checkpoint byte for byte, and nothing else written


def test_cadence_checkpoints_before_the_divergence_are_finite_and_none_after(world, capsys):
    out = world / "out" / "run"
    capsys.readouterr()
    assert train(world, "--steps", "12", "--lr", "1e6", "--checkpoint-every", "1", "--out", str(out)) == 2
    err = one_error_line(capsys)
    step = int(err.split("diverged at step ")[1].split()[0])
    if step == 1:
        assert not out.exists()
    else:  # the last cadence checkpoint is the step before, and holds finite weights
        saved = json.loads((out / "training.json").read_text())
        assert saved["step"] == step - 1 and all(map(math.isfinite, saved["history"]["train"]))
        model = blockspec.load(out)
        assert all(torch.isfinite(p).all() for p in model.parameters())


def inject(monkeypatch, module, *, at_step: int, where: str) -> None:
    """Make ``module.start``'s trainer produce a NaN activation (``where="forward"``) or an infinite gradient
    (``where="gradient"``) in step ``at_step`` only: a fault in the data or the model, not the settings."""
    real = module.start

    def start(run, **kwargs):
        trainer = real(run, **kwargs)
        faulty = lambda: trainer.raw.training and trainer.step == at_step - 1  # noqa: E731
        if where == "forward":
            trainer.raw.blocks[0].register_forward_hook(
                lambda m, args, output: output * math.nan if faulty() else output)
        else:
            trainer.raw.embedding.weight.register_hook(lambda grad: grad * math.inf if faulty() else grad)
        return trainer

    monkeypatch.setattr(module, "start", start)


@pytest.mark.parametrize("where, what", [("forward", "the loss is nan"), ("gradient", "the gradient norm is inf")])
def test_an_injected_fault_names_its_step_and_keeps_the_checkpoint(world, capsys, monkeypatch, where, what):
    before = snapshot(world)
    inject(monkeypatch, training, at_step=6, where=where)
    capsys.readouterr()
    assert train(world, "--resume", str(world / "ckpt"), "--steps", "8", "--checkpoint-every", "1") == 2
    err = one_error_line(capsys)
    assert "diverged at step 6 of 8" in err and what in err, err
    after = snapshot(world)
    assert json.loads(after["ckpt/training.json"])["step"] == 5  # the cadence checkpoint of step 5, not 6
    model = blockspec.load(world / "ckpt")
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert {k for k in after if not k.startswith("ckpt")} == {k for k in before if not k.startswith("ckpt")}


def test_an_infinite_gradient_stops_the_library_trainer_without_clipping(registry, one_thread):
    from blockspec.train.finite import DivergedError

    spec = blockspec.loads_spec(SPEC, registry)
    trainer = Trainer(blockspec.build(spec, registry=registry, seed=0), CharDataset.from_text(TEXT, None),
                      TrainConfig(steps=5, batch_size=4, eval_batches=1, grad_clip=None))
    trainer.raw.embedding.weight.register_hook(lambda grad: grad * math.inf if trainer.step == 2 else grad)
    with pytest.raises(DivergedError, match="diverged at step 3 of 5: the gradient norm is inf"):
        trainer.run()
    assert len(trainer.history.train) == 2  # the diverged step is not recorded as trained


def test_a_sweep_records_a_diverged_run_goes_on_and_does_not_redo_it(world, capsys, monkeypatch):
    from blockspec.train import sweep

    inject(monkeypatch, sweep, at_step=2, where="forward")
    out = world / "out" / "sweep"
    args = ["sweep", str(world / "spec.toml"), "--data", str(world / "play.txt"), "--vary", "norm.use=layernorm",
            "--seeds", "0", "--out", str(out), "--steps", "4", "--batch-size", "4", "--eval-batches", "1",
            "--eval-every", "2", "--device", "cpu"]
    capsys.readouterr()
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "diverged at step 2 of 4" in text, text
    row = next(csv.DictReader((out / "results.csv").open()))
    assert row["diverged"] == "1" and math.isnan(float(row["val_loss_mean"]))
    monkeypatch.undo()  # a rerun would not diverge now: it must not run at all
    assert main(args) == 0
    assert "diverged at step 2 of 4 (recorded)" in capsys.readouterr().out


def test_generate_refuses_nan_weights_in_one_line(world, capsys):
    model = blockspec.load(world / "ckpt")
    with torch.no_grad():
        model.blocks[0].ffn.parameters().__next__().fill_(math.nan)
    blockspec.save(model, world / "out" / "nan")
    before = snapshot(world)
    capsys.readouterr()
    assert main(["generate", str(world / "out" / "nan"), "--ids", "1,2", "--max-new-tokens", "3"]) == 2
    err = one_error_line(capsys)
    assert "blocks.0.ffn" in err and "nan" in err.lower(), err
    assert snapshot(world) == before


def test_generate_refuses_non_finite_logits_from_finite_weights(world, capsys):
    model = blockspec.load(world / "ckpt")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(3e38)  # finite, but every product overflows
    blockspec.save(model, world / "out" / "huge")
    capsys.readouterr()
    for temperature in ("0", "1"):
        assert main(["generate", str(world / "out" / "huge"), "--ids", "1,2", "--max-new-tokens", "3",
                     "--temperature", temperature]) == 2
        err = one_error_line(capsys)
        assert "logits" in err and "not finite" in err, err


@pytest.mark.parametrize("how", ["written in place", "loaded", "replaced"])
def test_a_weight_changed_after_a_finite_check_is_checked_again(world, how):
    """The weights are read once per change: a second generate reads none, a changed one reads them again."""
    from blockspec.errors import NonFiniteError
    from blockspec.generation.tokens import generate

    model, ids = blockspec.load(world / "ckpt"), torch.tensor([[1, 2]])
    generate(model, ids, max_new_tokens=2)  # finite: checked, and remembered
    ffn = model.blocks[0].ffn
    name, weight = next(iter(ffn.named_parameters()))
    with torch.no_grad():
        if how == "written in place":
            weight.view(-1)[0] = math.inf
        elif how == "loaded":
            ffn.load_state_dict({**ffn.state_dict(), name: torch.full_like(weight, math.nan)})
        else:
            module, _, leaf = name.rpartition(".")
            setattr(ffn.get_submodule(module) if module else ffn, leaf, torch.nn.Parameter(torch.full_like(weight, math.nan)))
    with pytest.raises(NonFiniteError, match=f"blocks.0.ffn.{name}"):
        generate(model, ids, max_new_tokens=2)
