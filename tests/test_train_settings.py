"""Trainer settings: the learning-rate schedule, gradient accumulation, which parameters decay, mixed
precision, torch.compile; saved with the checkpoint, honoured on resume, and refused in one line when bad."""

from __future__ import annotations

import json
import math

import pytest
import torch

import blockspec
from blockspec.cli import main
from blockspec.train.checkpointing import load_checkpoint, save_checkpoint
from blockspec.data.dataset import CharDataset
from blockspec.train.distributed import World
from blockspec.train.loop import Trainer, TrainConfig, TrainConfigError, make_config
from blockspec.train.optim import decayed_names, learning_rate

from .corpus import small_play
from .specs import spec_text

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

SPEC = spec_text(name="micro", vocab_size=64, context_length=16, d_model=32, n_layers=2, n_heads=4, d_ff=64,
                 positional="learned", tied=True)


@pytest.fixture(scope="module")
def data():
    return CharDataset.from_text(small_play())


def trainer(registry, data, spec=SPEC, **settings) -> Trainer:
    config = TrainConfig(**{"steps": 4, "batch_size": 8, "eval_every": 0, "eval_batches": 2, "lr": 1e-2, **settings})
    model = blockspec.build(blockspec.loads_spec(spec, registry), registry=registry, seed=config.seed)
    return Trainer(model, data, config)


def cosine(s: int, lr: float, floor: float, warmup: int, steps: int) -> float:
    return floor + (lr - floor) * 0.5 * (1 + math.cos(math.pi * (s - warmup) / (steps - warmup)))


def test_the_schedule_warms_up_linearly_then_decays_along_a_cosine_to_the_floor():
    rates = {s: learning_rate(s, lr=1.0, min_lr=0.1, warmup=4, steps=14) for s in (0, 1, 3, 4, 6, 9, 13, 14, 20)}
    assert [rates[s] for s in (0, 1, 3)] == pytest.approx([0.25, 0.5, 1.0])  # lr · (s + 1) / W
    assert rates[4] == pytest.approx(1.0)  # decay starts at the peak
    assert rates[9] == pytest.approx(0.55)  # half way: the mean of lr and the floor
    for s in (6, 13):
        assert rates[s] == pytest.approx(cosine(s, 1.0, 0.1, 4, 14))
    assert rates[14] == rates[20] == pytest.approx(0.1)  # the floor at the last step, and after it
    assert {TrainConfig(lr=3e-3).lr_at(s) for s in (0, 7, 599)} == {3e-3}  # the default: constant, as before


def test_each_step_uses_the_scheduled_rate(registry, data):
    run = trainer(registry, data, warmup=2, min_lr=1e-3)
    for step in range(4):
        run.train_step()
        assert [g["lr"] for g in run.optimizer.param_groups] == [run.config.lr_at(step)] * 2


def test_accumulating_two_half_batches_is_one_step_on_the_whole_batch(registry, data):
    whole, halves = trainer(registry, data), trainer(registry, data, grad_accum=2)
    assert torch.equal(torch.cat([x for x, _ in halves.micro_batches("train", "train", 3)]),
                       whole.batch("train", "train", 3)[0])  # the same samples, in two pieces
    assert whole.train_step() == pytest.approx(halves.train_step(), rel=1e-6)
    for (name, a), b in zip(whole.raw.named_parameters(), halves.raw.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-7), name  # the step's accumulated gradient
    assert whole.run().train == pytest.approx(halves.run().train, rel=1e-4)
    assert whole.history.evals[-1].val_loss == pytest.approx(halves.history.evals[-1].val_loss, rel=1e-4)


def test_pieces_that_do_not_split_a_ranks_rows_are_refused_with_the_fix(registry, data):
    run = trainer(registry, data, batch_size=6, grad_accum=2)
    run.world = World(rank=0, size=2)  # rank 0 of 2 (no process group needed to draw its rows)
    with pytest.raises(TrainConfigError, match="gives 3 rows each, which grad_accum 2 cannot split evenly; use a "
                                               "batch_size divisible by 4"):
        run.micro_batches("train", "train", 0)


@pytest.mark.parametrize("tied", [True, False])
def test_weight_decay_reaches_matrices_only(registry, data, tied):
    run = trainer(registry, data, spec=SPEC.replace("tied = true", f"tied = {str(tied).lower()}"), weight_decay=0.1)
    names = dict(run.raw.named_parameters())
    decayed = decayed_names(run.raw)
    assert decayed and all(names[n].dim() == 2 for n in decayed)
    assert not any("embedding" in n or "positional" in n or "norm" in n for n in decayed), decayed
    assert not any(names[n].dim() < 2 for n in decayed)  # no bias, no norm gain
    assert any(n.startswith("head") for n in decayed) == (not tied)  # a tied head *is* the embedding
    decay, rest = run.optimizer.param_groups
    assert (decay["weight_decay"], rest["weight_decay"]) == (0.1, 0.0)
    assert len(decay["params"]) + len(rest["params"]) == len(names)


def test_bf16_mixed_trains_and_stays_finite(registry, data):
    mixed = trainer(registry, data, precision="bf16-mixed").run()
    exact = trainer(registry, data).run()
    assert all(math.isfinite(v) for v in mixed.train) and mixed.train[-1] < mixed.train[0]
    assert mixed.train != exact.train  # autocast did run in bfloat16
    assert mixed.train == pytest.approx(exact.train, abs=0.05)


def test_the_routers_auxiliary_loss_survives_accumulation_and_mixed_precision(registry, data):
    moe = SPEC + '\n[ffn]\nuse = "moe"\nn_experts = 4\ntop_k = 2\n'
    run = trainer(registry, data, spec=moe, grad_accum=2, precision="bf16-mixed", steps=2)
    run.train_step()
    assert run._auxiliary() is not None and run._auxiliary() > 0
    assert math.isfinite(run.train_step())


def test_settings_travel_with_the_checkpoint_and_a_resumed_run_continues_the_schedule(registry, data, tmp_path):
    settings = {"steps": 6, "warmup": 2, "min_lr": 1e-3, "grad_accum": 2, "precision": "bf16-mixed",
                "weight_decay": 0.1}
    uninterrupted = trainer(registry, data, **settings)
    uninterrupted.run()
    first = trainer(registry, data, **settings)
    for _ in range(3):
        first.train_step()
    save_checkpoint(tmp_path / "ckpt", first.checkpoint())
    checkpoint = load_checkpoint(tmp_path / "ckpt", registry)
    config = make_config(checkpoint.training["config"])
    assert config == first.config
    resumed = Trainer(blockspec.build(checkpoint.spec, registry=registry, seed=9), data, config, resume=checkpoint)
    resumed.run()
    assert resumed.history.train == uninterrupted.history.train


def test_a_checkpoint_from_before_the_decay_groups_still_resumes(registry, data):
    old = trainer(registry, data)
    old.train_step()
    checkpoint = old.checkpoint()
    groups = checkpoint.optimizer_state["param_groups"]
    merged = {**groups[0], "params": [n for g in groups for n in g["params"]]}  # one group, as before
    state = {**checkpoint.optimizer_state, "param_groups": [merged]}
    resumed = Trainer(blockspec.build(checkpoint.spec, registry=registry, seed=0), data, old.config,
                      resume=type(checkpoint)(**{**vars_of(checkpoint), "optimizer_state": state}))
    assert len(resumed.optimizer.param_groups) == 2 and math.isfinite(resumed.train_step())


def vars_of(checkpoint) -> dict:
    import attrs

    return {f.name: getattr(checkpoint, f.name) for f in attrs.fields(type(checkpoint))}


def test_bad_settings_are_one_line_each_naming_the_setting():
    cases = [({"min_lr": 1.0, "lr": 0.1}, r"\$\.min_lr: expected a number <= the learning rate \(0\.1\), found 1\.0"),
             ({"grad_accum": 3, "batch_size": 8}, r"\$\.grad_accum: expected a divisor of batch_size \(8\), found 3"),
             ({"grad_accum": 0}, r"\$\.grad_accum: expected a positive integer, found 0"),
             ({"warmup": -1}, r"\$\.warmup: expected an integer >= 0, found -1"),
             ({"precision": "fp16"}, r"\$\.precision: expected 'fp32' or 'bf16-mixed', found 'fp16'"),
             ({"compile": "yes"}, r"\$\.compile: expected true or false, found str 'yes'")]
    for settings, message in cases:
        with pytest.raises(TrainConfigError, match=message) as caught:
            make_config(settings)
        assert len(str(caught.value).splitlines()) == 1


@pytest.fixture
def files(tmp_path):
    (tmp_path / "spec.toml").write_text(SPEC)
    (tmp_path / "play.txt").write_text(small_play())
    return tmp_path


def train(files, *args) -> int:
    return main(["train", str(files / "spec.toml"), "--data", str(files / "play.txt"), "--batch-size", "8",
                 "--eval-batches", "2", *args])


def test_the_flags_are_saved_and_honoured_on_resume(files, capsys):
    assert train(files, "--steps", "3", "--warmup", "2", "--min-lr", "1e-4", "--grad-accum", "2",
                 "--precision", "bf16-mixed", "--weight-decay", "0.1", "--out", str(files / "ckpt"), "--quiet") == 0
    capsys.readouterr()
    assert train(files, "--steps", "5", "--resume", str(files / "ckpt"), "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["tokens_per_s"] > 0 and "mfu" not in summary  # no measured peak on a CPU: no MFU
    training = json.loads((files / "ckpt" / "training.json").read_text())
    config = training["config"]
    assert (config["warmup"], config["min_lr"], config["grad_accum"], config["precision"]) == (2, 1e-4, 2, "bf16-mixed")
    assert config["steps"] == 5 and config["compile"] is False
    assert training["param_groups"][0]["lr"] == pytest.approx(make_config(config).lr_at(4))


def test_bad_flags_are_one_line_naming_the_flag(files, capsys):
    cases = [(["--min-lr", "1", "--lr", "0.1"], "--min-lr: expected a number <= the learning rate (0.1), found 1.0"),
             (["--grad-accum", "3"], "--grad-accum: expected a divisor of --batch-size (8), found 3"),
             (["--grad-accum", "0"], "--grad-accum: expected a positive integer, found '0'"),
             (["--warmup", "-2"], "--warmup: expected an integer >= 0, found '-2'"),
             (["--precision", "fp16"], "--precision: invalid choice: 'fp16'")]
    for args, message in cases:
        assert train(files, "--steps", "1", *args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("blockspec: error: ") and message in err and len(err.splitlines()) == 1, err


@pytest.mark.slow
def test_compile_trains_a_tiny_model_on_the_cpu_as_eager_does(registry, data):
    compiled = trainer(registry, data, compile=True, steps=2)
    assert compiled.run().train == pytest.approx(trainer(registry, data, steps=2).run().train, rel=1e-4)


def test_flops_per_token_count_the_weights_once_and_the_tied_head_as_a_matmul(registry, data):
    from blockspec.train.throughput import flops_per_token, measured_peak, utilisation

    model = trainer(registry, data).raw
    total = sum(p.numel() for p in model.parameters())
    tables = model.embedding.weight.numel() + 16 * 32  # tokens, learned positions (context 16 × d 32)
    expected = 6 * (total - tables + model.embedding.weight.numel()) + 12 * 2 * 32 * 16
    assert flops_per_token(model, n_layers=2, d_model=32, context_length=16) == expected
    assert measured_peak(torch.device("cpu")) is None and utilisation(1e3, expected, None) is None
    assert utilisation(1e3, 1e6, 4e9) == 0.25


def test_the_overhead_benchmark_runs_both_loops_on_the_same_model():
    from benchmarks.trainer_overhead import SPECS, measure

    row = measure(SPECS[0], batch_size=2, rounds=1, precision="fp32", threads=1, target_s=0.01)
    assert row["name"] == "tiny-shakespeare" and row["parameters"] == 108_352
    assert row["trainer"] > 0 and row["hand"] > 0 and row["ratio"] > 0
