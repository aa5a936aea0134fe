"""Kill -9 a training process while it checkpoints every step.

Half the kills come from inside: the child SIGKILLs itself at its k-th ``fsync``, so some
kills land mid-write on any machine, however fast. The other half come from outside at
random moments. After every kill the last good checkpoint loads and is whole (its files
agree on the step); resuming again and again still ends with exactly the uninterrupted
run's losses.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

import torch

import blockspec
from blockspec.train.checkpointing import load_checkpoint, save_checkpoint
from blockspec.data.dataset import CharDataset
from blockspec.train.loop import Trainer, TrainConfig

from .corpus import small_play
from .specs import spec_text

SELF_KILLS = 12
OUTSIDE_KILLS = 8
STEPS = 60
SPEC = spec_text(vocab_size=64, context_length=16, d_model=32, n_layers=2, n_heads=4, d_ff=64, positional="sinusoidal")
CONFIG = dict(steps=STEPS, batch_size=8, eval_every=5, eval_batches=2, seed=3)


def make_trainer(checkpoint=None) -> Trainer:
    torch.set_num_threads(1)
    registry = blockspec.load_registry()
    spec = blockspec.loads_spec(SPEC, registry)
    data = CharDataset.from_text(small_play(), checkpoint.tokenizer if checkpoint else None)
    return Trainer(blockspec.build(spec, registry=registry, seed=3), data, TrainConfig(**CONFIG), resume=checkpoint)


def die_at_fsync(number: int) -> None:
    """SIGKILL this process when it calls ``os.fsync`` for the ``number``-th time (only in the child)."""
    real_fsync, calls = os.fsync, [0]

    def counting_fsync(fd: int) -> None:
        calls[0] += 1
        if calls[0] == number:
            os.kill(os.getpid(), signal.SIGKILL)
        real_fsync(fd)

    os.fsync = counting_fsync


def train_and_checkpoint_every_step(directory: str, training=None, fsync_to_die_at: int | None = None) -> None:
    """The child: resume from the last checkpoint if there is one, then save after every step."""
    if fsync_to_die_at is not None:
        die_at_fsync(fsync_to_die_at)
    path = Path(directory) / "ckpt"
    checkpoint = load_checkpoint(path) if path.exists() else None
    trainer = make_trainer(checkpoint)

    def save_then_signal(t, _) -> None:
        save_checkpoint(path, t.checkpoint(), overwrite=True)
        if training is not None:
            training.set()  # one checkpoint of this child is committed; kills may now land anywhere

    trainer.run(on_step=save_then_signal)
    if training is not None:
        training.set()  # the run was already complete: nothing left to interrupt


def run_child(context, directory: Path, **kwargs):
    child = context.Process(target=train_and_checkpoint_every_step, args=(str(directory),), kwargs=kwargs)
    child.start()
    return child


def check_last_good(directory: Path, last_step: int) -> int:
    """The committed checkpoint never goes back, and its files come from one write."""
    if not (directory / "ckpt").exists():
        return last_step  # killed before its first checkpoint
    checkpoint = load_checkpoint(directory / "ckpt")
    assert checkpoint.step >= last_step, "a committed checkpoint was lost"
    assert len(checkpoint.training["history"]["train"]) == checkpoint.step, "files from different writes"
    return checkpoint.step


def new_temporaries(directory: Path, before: set[str]) -> bool:
    return any(p.name not in before | {"ckpt"} for p in directory.iterdir())


def test_kill_minus_nine_at_random_moments_never_loses_the_last_good_checkpoint(tmp_path):
    context = multiprocessing.get_context("forkserver")
    # The server imports torch once (optimizer construction pulls in torch._dynamo); children fork from it.
    context.set_forkserver_preload(["torch", "torch._dynamo", "blockspec.train.loop", "blockspec.train.checkpointing",
                                    "tests.test_checkpoint_kill"])
    rng = random.Random(0)
    last_step, mid_write = 0, 0
    for _ in range(SELF_KILLS):
        before = {p.name for p in tmp_path.iterdir()}
        child = run_child(context, tmp_path, fsync_to_die_at=rng.randint(1, 20))
        child.join(timeout=120)
        assert child.exitcode == -signal.SIGKILL, child.exitcode
        mid_write += new_temporaries(tmp_path, before)
        last_step = check_last_good(tmp_path, last_step)
    assert 0 < last_step < STEPS and mid_write > 0, (last_step, mid_write)
    for _ in range(OUTSIDE_KILLS):
        training = context.Event()
        child = run_child(context, tmp_path, training=training)
        assert training.wait(timeout=120), "the child never started training"
        time.sleep(rng.uniform(0.0, 0.2))
        child.kill()  # SIGKILL
        child.join()
        last_step = check_last_good(tmp_path, last_step)
    finisher = run_child(context, tmp_path)
    finisher.join(timeout=120)
    assert finisher.exitcode == 0
    resumed = load_checkpoint(tmp_path / "ckpt")
    uninterrupted = make_trainer()
    uninterrupted.run()
    assert resumed.step == STEPS
    assert resumed.training["history"] == uninterrupted.history.to_dict()
    for name, tensor in resumed.model_state.items():
        assert torch.equal(tensor, uninterrupted.raw.state_dict()[name]), name
