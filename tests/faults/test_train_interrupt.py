"""Ctrl-C and kill -9 at random points of `blockspec train` and `blockspec sweep`, each in a child process.

Ctrl-C (SIGINT) finishes the step under way, saves a resumable checkpoint and exits 130 with one line; a
second Ctrl-C during that save leaves the old checkpoint byte for byte. After either signal, or a kill -9,
resuming (`train --resume`, or the same sweep command) ends with exactly the uninterrupted run's losses and
weights, and a sweep never trains a finished run again.

Children fork from a forkserver that has imported torch and blockspec once, so a child starts in a fraction
of a second. The delays come from ``random.Random(SEED)``; BLOCKSPEC_SLOW=1 tries five times as many points.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import blockspec
from blockspec.cli import main

from ..corpus import small_play
from ..specs import spec_text

SEED = int(os.environ.get("BLOCKSPEC_FAULT_SEED", "22"))
ROUNDS = 5 if os.environ.get("BLOCKSPEC_SLOW", "") not in ("", "0") else 1
TEXT = small_play(200)
SPEC = spec_text(name="micro", vocab_size=len(set(TEXT)), context_length=16, d_model=16, n_layers=1, n_heads=2,
                 d_ff=32)
FAST = ["--batch-size", "4", "--eval-batches", "1", "--eval-every", "5", "--quiet", "--threads", "1"]
STEPS = 30
SWEEP_STEPS = 12  # per run; a sweep has 4 runs
TIMEOUT = 120  # seconds: a child that takes longer has hung


# ---------------------------------------------------------------- the child


def child(argv: list[str], stderr: str, ready, started, self_signals: dict[str, int] | None = None) -> None:
    """Run ``blockspec ARGV`` with stderr in a file; set ``ready`` as it calls ``main``, ``started`` after
    the first training step. Its exit code is main's.

    ``self_signals`` makes the child SIGINT itself: at the end of its ``at_call``-th training step (counted
    over a sweep's runs), and, with ``at_fsync``, again at the ``at_fsync``-th fsync after that (inside the
    save the first one asked for).
    """
    import blockspec.train.loop as loop

    torch.set_num_threads(1)
    descriptor = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(descriptor, 2)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    sys.stdout = open(os.devnull, "w")
    real_step, steps, fsyncs = loop.Trainer.train_step, [0], [0]

    def train_step(trainer) -> float:
        loss = real_step(trainer)
        started.set()
        steps[0] += 1
        if self_signals and steps[0] == self_signals["at_call"]:
            os.kill(os.getpid(), signal.SIGINT)
            if "at_fsync" in self_signals:
                _signal_at_fsync(self_signals["at_fsync"], fsyncs)
        return loss

    loop.Trainer.train_step = train_step
    ready.set()
    code = main(argv)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except KeyboardInterrupt:  # the signal came after main had answered: main's code stands
        pass
    os._exit(code)


def _signal_at_fsync(number: int, calls: list[int]) -> None:
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        calls[0] += 1
        if calls[0] == number:
            os.kill(os.getpid(), signal.SIGINT)
        real_fsync(fd)

    os.fsync = counting_fsync


@pytest.fixture(scope="module")
def context():
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch._dynamo", "blockspec.cli", "blockspec.train.run",
                                    "blockspec.train.sweep", "tests.faults.test_train_interrupt"])
    return context


class Child:
    """One `blockspec` process: start it, signal it once it trains (or at once), wait for it."""

    def __init__(self, context, argv: list[str], stderr: Path, **kwargs) -> None:
        self.ready, self.started, self.stderr = context.Event(), context.Event(), stderr
        self.process = context.Process(target=child, args=(argv, str(stderr), self.ready, self.started),
                                       kwargs=kwargs)
        self.process.start()

    def signal_after(self, delay: float, number: int, *, wait_for_training: bool = True) -> None:
        """Signal ``delay`` seconds after the first training step (or after main began)."""
        (self.started if wait_for_training else self.ready).wait(timeout=TIMEOUT)
        time.sleep(delay)
        if self.process.is_alive():
            os.kill(self.process.pid, number)

    def finish(self) -> tuple[int, str]:
        self.process.join(timeout=TIMEOUT)
        assert self.process.exitcode is not None, "the child hung"
        return self.process.exitcode, self.stderr.read_text()


# ---------------------------------------------------------------- what holds


@pytest.fixture
def world(tmp_path, one_thread):
    (tmp_path / "spec.toml").write_text(SPEC)
    (tmp_path / "play.txt").write_text(TEXT)
    return tmp_path


def train_argv(world: Path, out: Path, *extra: str, steps: int = STEPS) -> list[str]:
    return ["train", str(world / "spec.toml"), "--data", str(world / "play.txt"), "--steps", str(steps),
            "--out", str(out), *FAST, *extra]


def record(checkpoint: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """What must continue bit for bit: the step and loss history, and every weight."""
    training = json.loads((checkpoint / "training.json").read_text())
    return ({"step": training["step"], "history": training["history"]},
            load_file(checkpoint / "model.safetensors"))


def assert_same_run(resumed: Path, whole: Path) -> None:
    (mine, weights), (theirs, expected) = record(resumed), record(whole)
    assert mine == theirs
    assert weights.keys() == expected.keys()
    for name in expected:
        assert torch.equal(weights[name], expected[name]), name


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


def staging_left(root: Path) -> list[str]:
    return [p.name for p in root.rglob(".*") if ".tmp-" in p.name or p.name.endswith(".previous")]


def one_line(stderr: str, prefix: str) -> str:
    assert len(stderr.splitlines()) == 1 and stderr.startswith(prefix), stderr
    return stderr


def resume_to_the_end(world: Path, checkpoint: Path) -> None:
    assert main(["train", str(checkpoint), "--data", str(world / "play.txt"), "--resume", str(checkpoint),
                 "--steps", str(STEPS), *FAST]) == 0


@pytest.fixture
def whole_run(world):
    assert main(train_argv(world, world / "whole")) == 0
    return world / "whole"


# ---------------------------------------------------------------- train


def test_sigint_at_random_points_of_train_saves_a_checkpoint_that_resumes_bit_for_bit(world, whole_run, context):
    """Per round: a signal at the end of a random step (it must save there), one at a random moment of the
    training, one at a random moment from the start (start-up included: nothing to save yet)."""
    rng = random.Random(SEED)
    for attempt in range(3 * ROUNDS):
        out, kind = world / f"run{attempt}", ("step", "training", "start")[attempt % 3]
        at_step = rng.randint(1, STEPS - 1)
        process = Child(context, train_argv(world, out), world / f"err{attempt}",
                        self_signals={"at_call": at_step} if kind == "step" else None)
        if kind != "step":
            delay = rng.uniform(0.0, 0.15) if kind == "training" else rng.uniform(0.01, 1.5)
            process.signal_after(delay, signal.SIGINT, wait_for_training=kind == "training")
        code, stderr = process.finish()
        assert code in (0, 130), (code, stderr)
        assert not staging_left(world)
        if code == 130:
            line = one_line(stderr, "blockspec: interrupted")
            if kind == "step" or "saved" in line:
                step = record(out)[0]["step"]
                assert step == at_step or kind != "step"
                assert line.endswith(f"stopped at step {step} of {STEPS} and saved {out}; "
                                     f"`--resume {out}` continues the run\n"), line
        assert code == 130 or kind != "step"
        if out.exists():
            resume_to_the_end(world, out)
            assert_same_run(out, whole_run)


def test_a_second_sigint_during_the_save_leaves_the_old_checkpoint_whole(world, context):
    out = world / "ckpt"
    assert main(train_argv(world, out, steps=4)) == 0
    before = snapshot(world)
    rng = random.Random(SEED)
    interrupted_mid_save = 0
    for attempt in range(2 * ROUNDS):
        argv = ["train", str(out), "--data", str(world / "play.txt"), "--resume", str(out), "--steps", str(STEPS),
                *FAST]
        process = Child(context, argv, world.parent / f"{world.name}-err{attempt}",
                        self_signals={"at_call": rng.randint(1, STEPS - 5), "at_fsync": rng.randint(1, 6)})
        code, stderr = process.finish()
        assert code == 130, stderr
        line = one_line(stderr, "blockspec: interrupted: interrupted again ")
        if "while saving" in line:
            assert f"nothing was saved over {out}" in line
            assert snapshot(world) == before  # the old checkpoint, byte for byte, and no staging left
        else:  # the second signal came after the new checkpoint was in place: it is whole
            step = int(line.split("after saving step ")[1].split()[0])
            assert line.endswith(f"after saving step {step} to {out}\n") and record(out)[0]["step"] == step
            assert blockspec.load(out) is not None and not staging_left(world)
            assert main(train_argv(world, out, "--force", steps=4)) == 0  # the old one back, for the next
            before = snapshot(world)
        interrupted_mid_save += "while saving" in line
    assert interrupted_mid_save >= ROUNDS


def test_kill_minus_nine_at_random_points_of_train_then_resume_continues_bit_for_bit(world, whole_run, context):
    out = world / "ckpt"
    rng = random.Random(SEED)
    last_step = 0
    for attempt in range(2 * ROUNDS):
        argv = (["train", str(out), "--resume", str(out), "--data", str(world / "play.txt"), *FAST,
                 "--checkpoint-every", "3"] if out.exists() else train_argv(world, out, "--checkpoint-every", "3"))
        process = Child(context, argv, world / f"err{attempt}")
        process.signal_after(rng.uniform(0.0, 0.15), signal.SIGKILL)
        code, _ = process.finish()
        assert code in (0, -signal.SIGKILL)
        if out.exists():
            step = record(out)[0]["step"]
            assert step >= last_step, "a committed checkpoint was lost"
            last_step = step
    if not out.exists():
        assert main(train_argv(world, out)) == 0
    resume_to_the_end(world, out)  # also removes what a killed writer staged
    assert not staging_left(world)
    assert_same_run(out, whole_run)


# ---------------------------------------------------------------- sweep


def sweep_argv(world: Path, out: Path, *extra: str) -> list[str]:
    return ["sweep", str(world / "spec.toml"), "--data", str(world / "play.txt"), "--vary",
            "positional.use=learned,sinusoidal", "--seeds", "0,1", "--out", str(out), "--steps", str(SWEEP_STEPS),
            "--batch-size", "4", "--eval-batches", "1", "--eval-every", "4", "--device", "cpu", *extra]


def finished_runs(out: Path) -> dict[str, dict[str, bytes | None]]:
    """Each run whose checkpoint reached the last step, with its bytes (not the staging a killed save left
    beside it, nor a lock file: their names start with a dot, and the next writer of that run removes them)."""
    runs = {}
    for run in sorted((out / "runs").glob("[!.]*")) if (out / "runs").exists() else []:
        if (run / "training.json").exists() and json.loads((run / "training.json").read_text())["step"] == SWEEP_STEPS:
            runs[run.name] = snapshot(run)
    return runs


def assert_same_sweep(out: Path, whole: Path) -> None:
    names = sorted(p.name for p in (whole / "runs").iterdir())
    assert sorted(p.name for p in (out / "runs").iterdir()) == names
    for name in names:
        assert_same_run(out / "runs" / name, whole / "runs" / name)


@pytest.fixture
def whole_sweep(world, capsys):
    assert main(sweep_argv(world, world / "whole-sweep")) == 0
    capsys.readouterr()
    return world / "whole-sweep"


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "kill-9"])
def test_a_signalled_sweep_resumes_without_losing_or_redoing_a_run(world, whole_sweep, context, capsys, number):
    """Signals at random moments after training began; for SIGINT, also at the end of a random step of any
    run, where the run must be saved (Ctrl-C needs no --checkpoint-every)."""
    out = world / "sweep"
    rng = random.Random(SEED + number)
    extra = [] if number == signal.SIGINT else ["--checkpoint-every", "2"]
    for attempt in range(2 * ROUNDS):
        finished = finished_runs(out)
        at_step = rng.randint(1, 4 * SWEEP_STEPS - 1) if number == signal.SIGINT and attempt % 2 == 0 else None
        process = Child(context, sweep_argv(world, out, *extra), world / f"err{attempt}",
                        self_signals=None if at_step is None else {"at_call": at_step})
        if at_step is None:
            process.signal_after(rng.uniform(0.0, 0.6), number)
        code, stderr = process.finish()
        assert code in (0, 130 if number == signal.SIGINT else -signal.SIGKILL), (code, stderr)
        if code == 130:
            line = one_line(stderr, "blockspec: interrupted")
            assert "saved" not in line or "rerun the same sweep command to resume it" in line
            assert at_step is None or "saved" in line, line
        now = finished_runs(out)
        assert {name: now[name] for name in finished} == finished, "a finished run was trained again"
    finished = finished_runs(out)
    capsys.readouterr()
    assert main(sweep_argv(world, out, *extra)) == 0
    assert capsys.readouterr().out.count("already done") == len(finished)
    assert {name: finished_runs(out)[name] for name in finished} == finished
    assert not staging_left(out)
    assert_same_sweep(out, whole_sweep)
