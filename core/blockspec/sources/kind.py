"""What is at a path: a spec file, a checkpoint, a training checkpoint or a Hugging Face directory.

Torch-free: the answer reads at most the checkpoint's manifest. Each layout's marker file is
its owner's (``checkpoint.layout``, ``interop.hf_layout``); this module only puts them in order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from blockspec.checkpoint.layout import MANIFEST_FILE, TRAINING_FILE, is_checkpoint
from blockspec.checkpoint.manifest import read_manifest
from blockspec.errors import CheckpointError, Problem
from blockspec.interop.hf_layout import CONFIG, is_hf_directory

SourceKind = Literal["spec", "checkpoint", "training-checkpoint", "hf"]
CHECKPOINT_KINDS: frozenset[SourceKind] = frozenset({"checkpoint", "training-checkpoint"})

__all__ = ["CHECKPOINT_KINDS", "SourceKind", "is_checkpoint", "source_kind"]


def source_kind(path: str | Path) -> SourceKind:
    """The kind of source at ``path``; CheckpointError for a directory that is none of them."""
    path = Path(path)
    if not path.is_dir():
        return "spec"
    if is_checkpoint(path):
        return "training-checkpoint" if TRAINING_FILE in read_manifest(path).files else "checkpoint"
    if is_hf_directory(path):
        return "hf"
    raise CheckpointError(Problem(file=str(path), message=f"a directory, but neither a blockspec checkpoint "
                                                          f"({MANIFEST_FILE}) nor a Hugging Face model ({CONFIG})"))
