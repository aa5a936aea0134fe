"""The file names of a checkpoint directory, defined once: every other module imports them from here.

Layout::

    CKPT/
      manifest.json          what marks the directory as a checkpoint: the record of every file
      spec.toml              the spec and its [lock]
      model.safetensors      the weights
      adapter.safetensors    an adapter checkpoint's weights instead: its adapters' tensors only
      base.json              an adapter checkpoint's base: where it is and what it holds (base_ref.py)
      tokenizer.json         a trained model's tokenizer (characters, or a BPE tokenizer.json)
      optimizer.safetensors  training only: AdamW's moments and the RNG
      training.json          training only: step, settings, history
      hf/...                 the Hugging Face files a model came with (config.json, tokenizer files)

Torch-free, so the command line can tell a checkpoint from another directory cheaply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from blockspec.outputs.kinds import directory_kind

MANIFEST_FILE = "manifest.json"
SPEC_FILE = "spec.toml"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
OPTIMIZER_FILE = "optimizer.safetensors"
TRAINING_FILE = "training.json"
ADAPTER_FILE = "adapter.safetensors"
BASE_FILE = "base.json"
CARRIED_PREFIX = "hf/"
RESERVED = (SPEC_FILE, WEIGHTS_FILE, MANIFEST_FILE, ADAPTER_FILE, BASE_FILE)
# Only resuming training reads these: the model is whole without them, so a load tolerates their absence.
TRAINING_FILES = frozenset({OPTIMIZER_FILE, TRAINING_FILE})
# what ``--force`` may replace with a checkpoint: a directory with a manifest (its files are the manifest's)
CHECKPOINT = directory_kind("a blockspec checkpoint", markers=(MANIFEST_FILE,))


def is_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a checkpoint directory (it has a manifest); says nothing of its health."""
    return (Path(path) / MANIFEST_FILE).is_file()


def carried_entries(carried: Mapping[str, bytes]) -> dict[str, bytes]:
    """Hugging Face files by their own name -> by their name in a checkpoint ("hf/config.json")."""
    return {CARRIED_PREFIX + name: data for name, data in carried.items()}


def carried_names(files: Iterable[str]) -> list[str]:
    """The checkpoint files (names as in the manifest) that hold carried Hugging Face files."""
    return [name for name in files if name.startswith(CARRIED_PREFIX)]
