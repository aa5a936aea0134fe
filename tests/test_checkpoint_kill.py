"""Kill -9 a training process at random moments while it checkpoints every step.

After every kill the last good checkpoint loads and is whole (its files agree on the
step); resuming again and again still ends with exactly the uninterrupted run's losses.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from pathlib import Path

import torch

import blockspec
from blockspec.train.checkpointing import load_checkpoint, save_checkpoint
from blockspec.train.data import CharDataset
from blockspec.train.loop import Trainer, TrainConfig

from .corpus import small_play

KILLS = 20
STEPS = 60
SPEC = """
[model]
vocab_size = 64
context_length = 16
d_model = 32
n_layers = 2
n_heads = 4
d_ff = 64

[positional]
use = "sinusoidal"

[norm]
use = "layernorm"

[activation]
use = "gelu"

[head]
use = "lm"
"""
CONFIG = dict(steps=STEPS, batch_size=8, eval_every=5, eval_batches=2, seed=3)


def make_trainer(checkpoint=None) -> Trainer:
    torch.set_num_threads(1)
    registry = blockspec.load_registry()
    spec = blockspec.loads_spec(SPEC, registry)
    data = CharDataset.from_text(small_play(), checkpoint.tokenizer if checkpoint else None)
    return Trainer(blockspec.build(spec, registry=registry, seed=3), data, TrainConfig(**CONFIG), resume=checkpoint)


def train_and_checkpoint_every_step(directory: str, training=None) -> None:
    """The child: resume from the last checkpoint if there is one, then save after every step."""
    path = Path(directory) / "ckpt"
    checkpoint = load_checkpoint(path) if path.exists() else None
    trainer = make_trainer(checkpoint)

    def save_then_signal(t, _) -> None:
        save_checkpoint(path, t.checkpoint())
        if training is not None:
            training.set()  # one checkpoint of this child is committed; kills may now land anywhere

    trainer.run(on_step=save_then_signal)
    if training is not None:
        training.set()  # the run was already complete: nothing left to interrupt


def test_kill_minus_nine_at_random_moments_never_loses_the_last_good_checkpoint(tmp_path):
    context = multiprocessing.get_context("forkserver")
    # The server imports torch once (optimizer construction pulls in torch._dynamo); children fork from it.
    context.set_forkserver_preload(["torch", "torch._dynamo", "blockspec.train.loop", "blockspec.train.checkpointing",
                                    "tests.test_checkpoint_kill"])
    rng = random.Random(0)
    last_step, mid_write = 0, 0
    for _ in range(KILLS):
        before = {p.name for p in tmp_path.iterdir()}
        training = context.Event()
        child = context.Process(target=train_and_checkpoint_every_step, args=(str(tmp_path), training))
        child.start()
        assert training.wait(timeout=120), "the child never started training"
        time.sleep(rng.uniform(0.0, 0.2))
        child.kill()  # SIGKILL
        child.join()
        mid_write += any(p.name not in before | {"ckpt"} for p in tmp_path.iterdir())  # a new temporary left
        if not (tmp_path / "ckpt").exists():
            continue  # killed before its first checkpoint
        checkpoint = load_checkpoint(tmp_path / "ckpt")
        assert checkpoint.step >= last_step, "a committed checkpoint was lost"
        assert len(checkpoint.training["history"]["train"]) == checkpoint.step, "files from different writes"
        last_step = checkpoint.step
    assert last_step > 0 and mid_write > 0, (last_step, mid_write)
    finisher = context.Process(target=train_and_checkpoint_every_step, args=(str(tmp_path),))
    finisher.start()
    finisher.join(timeout=120)
    assert finisher.exitcode == 0
    resumed = load_checkpoint(tmp_path / "ckpt")
    uninterrupted = make_trainer()
    uninterrupted.run()
    assert resumed.step == STEPS
    assert resumed.training["history"] == uninterrupted.history.to_dict()
    for name, tensor in resumed.model_state.items():
        assert torch.equal(tensor, uninterrupted.raw.state_dict()[name]), name
