"""Where a model can come from: a spec file, a blockspec checkpoint, or a Hugging Face directory.

Commands that take a SPEC take any of the three; torch loads only when weights are needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from blockspec.registry.specs import load_spec
from blockspec.errors import CheckpointError
from blockspec.registry.components import Registry
from blockspec.spec.schema import ModelSpec

if TYPE_CHECKING:
    from blockspec.modules.transformer import Transformer

MANIFEST = "manifest.json"
HF_CONFIG = "config.json"


def source_kind(path: str | Path) -> str:
    """'spec', 'checkpoint' or 'hf'; CheckpointError for a directory that is neither."""
    path = Path(path)
    if not path.is_dir():
        return "spec"
    if (path / MANIFEST).is_file():
        return "checkpoint"
    if (path / HF_CONFIG).is_file():
        return "hf"
    raise CheckpointError(f"{path}: a directory, but neither a blockspec checkpoint ({MANIFEST}) "
                          f"nor a Hugging Face model ({HF_CONFIG})")


def load_spec_or_checkpoint(path: str | Path, registry: Registry) -> ModelSpec:
    """The spec of a spec file, of a checkpoint (verified), or derived from a Hugging Face config.json."""
    kind = source_kind(path)
    if kind == "checkpoint":
        from blockspec.checkpoint.directory import load_spec_of

        return load_spec_of(path, registry)
    if kind == "hf":
        from blockspec.interop import spec_from_hf

        return spec_from_hf(Path(path), registry)[0]
    return load_spec(path, registry)


def load_model(path: str | Path, registry: Registry, *, seed: int = 0, allow_pickle: bool = False) -> Transformer:
    """A model with its weights (checkpoint, Hugging Face) or freshly built from a spec with ``seed``."""
    kind = source_kind(path)
    if kind == "checkpoint":
        from blockspec.checkpoint.directory import load

        return load(path, registry=registry)
    if kind == "hf":
        from blockspec.interop import import_hf

        return import_hf(path, registry=registry, allow_pickle=allow_pickle)
    from blockspec.assembly.assemble import build

    return build(load_spec(path, registry), registry=registry, seed=seed).eval()
