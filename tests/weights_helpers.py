"""Helpers for the checkpoint and interop tests: tiny specs, re-signing a tampered checkpoint."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import blockspec
from blockspec.checkpoint.manifest import MANIFEST_FILE, Manifest, read_manifest, record_files, tensor_digests
from blockspec.checkpoint.safetensors_file import read_header

GPT2_TEXT = """
[model]
name = "tiny-gpt2"
vocab_size = 101
context_length = 32
d_model = 32
n_layers = 2
n_heads = 4
d_ff = 48
[positional]
use = "learned"
[norm]
use = "layernorm"
[activation]
use = "gelu"
approximate = "tanh"
[head]
use = "lm"
tied = {tied}
"""

LLAMA_TEXT = """
[model]
name = "tiny-llama"
vocab_size = 97
context_length = 64
d_model = 32
n_layers = 2
n_heads = 4
n_kv_heads = {kv}
d_ff = 40
bias = {bias}
[positional]
use = "rope"
base = 10000.0
layout = "{layout}"
[norm]
use = "rmsnorm"
eps = 1e-6
[activation]
use = "swiglu"
[head]
use = "lm"
tied = {tied}
"""


def gpt2_spec(registry, *, tied: bool = True) -> blockspec.ModelSpec:
    return blockspec.loads_spec(GPT2_TEXT.format(tied=str(tied).lower()), registry)


def llama_spec(registry, *, kv: int = 2, bias: bool = False, tied: bool = False, layout: str = "half"):
    text = LLAMA_TEXT.format(kv=kv, bias=str(bias).lower(), tied=str(tied).lower(), layout=layout)
    return blockspec.loads_spec(text, registry)


def randomized(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter random, norms and biases included, so a mis-mapped tensor cannot hide."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2
                            + (1.0 if parameter.ndim == 1 else 0.0))
    return model.eval()


def resign(checkpoint: Path) -> None:
    """Recompute the manifest after a deliberate edit, as an attacker (or a careful user) would."""
    old = read_manifest(checkpoint)
    manifest = Manifest(files=record_files(checkpoint, old.files),
                        tensors=tensor_digests(read_header(checkpoint / "model.safetensors")), extra=old.extra)
    (checkpoint / MANIFEST_FILE).write_text(manifest.to_json(), encoding="utf-8")


def edit_weights(checkpoint: Path, change: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]) -> None:
    path = checkpoint / "model.safetensors"
    save_file(change(load_file(str(path))), str(path), metadata={"format": "pt"})


def manifest_json(checkpoint: Path) -> dict:
    return json.loads((checkpoint / MANIFEST_FILE).read_text())
