"""`torchrun --nproc_per_node=2 -m blockspec train` on CPU (gloo) trains the single-process model.

Each rank takes its half of the step's global batch; DDP averages the gradients, so one
step on two processes must equal one step on one process with the concatenated batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

import blockspec
from blockspec.data.dataset import CharDataset
from blockspec.train.loop import Trainer, TrainConfig

from .corpus import small_play
from .specs import spec_text

SPEC = spec_text(name="micro", vocab_size=64, context_length=16, d_model=32, n_layers=2, n_heads=4, d_ff=64,
                 positional="rope")
FLAGS = ["--steps", "1", "--batch-size", "8", "--eval-every", "0", "--eval-batches", "2", "--seed", "5"]


def torchrun(*args: str, cwd) -> dict:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "-m", "blockspec", "train", *args, "--json", "--device", "cpu"]
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=240,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)  # rank 0 prints the one JSON document


# the trainer's settings under DDP and FSDP2: two micro-batches per rank, decay on matrices, a warm-up
SETTINGS = {"grad_accum": 2, "weight_decay": 0.1, "warmup": 2, "min_lr": 1e-4}


def single_process_step(registry, text: str, **settings) -> Trainer:
    spec = blockspec.loads_spec(SPEC, registry)
    config = TrainConfig(steps=1, batch_size=8, eval_every=0, eval_batches=2, seed=5, **settings)
    trainer = Trainer(blockspec.build(spec, registry=registry, seed=5), CharDataset.from_text(text), config)
    trainer.run()
    return trainer


@pytest.mark.parametrize("settings", [{}, SETTINGS], ids=["defaults", "accumulated"])
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_one_two_process_step_equals_one_step_on_the_concatenated_batch(registry, tmp_path, strategy, settings):
    (tmp_path / "spec.toml").write_text(SPEC)
    (tmp_path / "play.txt").write_text(small_play())
    extra = ["--fsdp"] if strategy == "fsdp" else []
    extra += [text for name, value in settings.items() for text in (f"--{name.replace('_', '-')}", str(value))]
    summary = torchrun("spec.toml", "--data", "play.txt", *FLAGS, "--out", "ckpt", *extra, cwd=tmp_path)
    reference = single_process_step(registry, small_play(), **settings)
    assert summary["world_size"] == 2 and summary["steps"] == 1
    saved = json.loads((tmp_path / "ckpt" / "training.json").read_text())
    assert saved["history"]["train"][0] == pytest.approx(reference.history.train[0], rel=1e-6)
    assert summary["val_loss"] == pytest.approx(reference.history.evals[-1].val_loss, rel=1e-6)
    weights = load_file(tmp_path / "ckpt" / "model.safetensors")
    expected = {k: v for k, v in reference.raw.state_dict().items() if k != "head.weight"}
    assert weights.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-5, atol=2e-6, msg=name)
    untrained = blockspec.build(reference.spec, registry=registry, seed=5).state_dict()
    assert not torch.equal(weights["blocks.0.attn.qkv.weight"], untrained["blocks.0.attn.qkv.weight"])


LORA = '[[adapters]]\nuse = "lora"\ntargets = ["@attention"]\nrank = 4\nalpha = 8\n'


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_adapter_training_on_two_processes_equals_one(registry, tmp_path, strategy):
    """A frozen base with LoRA on its attention: both strategies train the adapters alone, as one process does."""
    from blockspec.assembly.assemble import adapt
    from blockspec.modules.adapter import adapter_state
    from blockspec.registry.specs import load_adapters

    spec = blockspec.loads_spec(SPEC, registry)
    blockspec.save(blockspec.build(spec, registry=registry, seed=1), tmp_path / "base")
    (tmp_path / "lora.toml").write_text(LORA)
    (tmp_path / "play.txt").write_text(small_play())
    extra = ["--fsdp"] if strategy == "fsdp" else []
    torchrun("base", "--adapters", "lora.toml", "--data", "play.txt", *FLAGS, "--lr", "1e-2", "--out", "ad", *extra,
             cwd=tmp_path)
    config = TrainConfig(steps=1, batch_size=8, eval_every=0, eval_batches=2, seed=5, lr=1e-2)
    model = adapt(blockspec.load(tmp_path / "base"), load_adapters(tmp_path / "lora.toml", spec, registry),
                  registry, seed=5)
    reference = Trainer(model, CharDataset.from_text(small_play()), config)
    reference.run()
    saved = load_file(tmp_path / "ad" / "adapter.safetensors")
    expected = adapter_state(reference.raw)
    assert saved.keys() == expected.keys() and not (tmp_path / "ad" / "model.safetensors").exists()
    for name, tensor in expected.items():
        torch.testing.assert_close(saved[name], tensor, rtol=1e-5, atol=2e-6, msg=name)
    assert any(name.endswith("lora_B.weight") and tensor.abs().sum() > 0 for name, tensor in saved.items())
