"""Where a model can come from: a spec file, a blockspec checkpoint, or a Hugging Face directory.

Every command that takes a SPEC resolves it here, so each takes all three:
``load_spec_or_checkpoint`` gives the spec, ``load_model`` the model with its weights.
A spec file may be a checkpoint's own spec.toml: its [lock] table is checked against the
registry and settles ambiguous names, as when the checkpoint itself is loaded. Torch loads
only when weights are needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from blockspec.errors import CheckpointError
from blockspec.registry.components import Registry
from blockspec.registry.specs import structure_spec
from blockspec.spec import toml_read
from blockspec.spec.convert import read_spec_text
from blockspec.spec.schema import ModelSpec

if TYPE_CHECKING:
    import torch

    from blockspec.modules.transformer import Transformer

MANIFEST = "manifest.json"
HF_CONFIG = "config.json"
LOCK_TABLE = "lock"


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


def load_spec_or_checkpoint(path: str | Path, registry: Registry | None = None) -> ModelSpec:
    """The spec of any model source: a spec file (a checkpoint's spec.toml with its [lock] included),
    a checkpoint (verified), or a Hugging Face directory (derived from its config.json)."""
    registry = registry if registry is not None else _default_registry()
    kind = source_kind(path)
    if kind == "checkpoint":
        from blockspec.checkpoint.directory import load_spec_of

        return load_spec_of(path, registry)
    if kind == "hf":
        from blockspec.interop import spec_from_hf

        return spec_from_hf(Path(path), registry)[0]
    return _read_spec_file(path, registry)


def _read_spec_file(path: str | Path, registry: Registry) -> ModelSpec:
    text = read_spec_text(path)
    document = toml_read.parse(text, str(path))
    if LOCK_TABLE not in document:
        return structure_spec(document, registry, file=str(path), text=text)
    from blockspec.checkpoint.directory import locked_spec  # torch: only for a spec.toml with a lock

    return locked_spec(document, registry, file=str(path), text=text)


def load_model(
    path: str | Path,
    registry: Registry | None = None,
    *,
    seed: int = 0,
    allow_pickle: bool = False,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Transformer:
    """A model with its weights (checkpoint, Hugging Face) or freshly built from a spec with ``seed``.

    Like every model blockspec makes, it comes back in training mode: call ``.eval()`` to infer.
    """
    registry = registry if registry is not None else _default_registry()
    if source_kind(path) == "spec":
        from blockspec.assembly.assemble import build

        return build(_read_spec_file(path, registry), registry=registry, seed=seed, dtype=dtype, device=device)
    return load(path, registry=registry, allow_pickle=allow_pickle, dtype=dtype, device=device)


def load(
    path: str | Path,
    *,
    registry: Registry | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    allow_pickle: bool = False,
) -> Transformer:
    """``blockspec.load``: a model with its weights from a checkpoint or a Hugging Face directory.

    A checkpoint is verified (``blockspec.checkpoint.directory.load``); a Hugging Face
    directory is imported (``import_hf``; ``allow_pickle`` lets it read a ``.bin``). A spec
    file holds no weights: that is a CheckpointError pointing at ``blockspec.build``.
    The model comes back in training mode, like one ``build`` returns.
    """
    kind = source_kind(path)
    if kind == "spec":
        raise CheckpointError(f"{path}: a spec file holds no weights; blockspec.load reads a checkpoint or a "
                              "Hugging Face directory; build a model from a spec with "
                              "blockspec.build(blockspec.load_spec(path), seed=0)")
    if kind == "checkpoint":
        from blockspec.checkpoint.directory import load as load_checkpoint

        return load_checkpoint(path, registry=registry, dtype=dtype, device=device)
    from blockspec.interop import import_hf

    model = import_hf(path, registry=registry, allow_pickle=allow_pickle, dtype=dtype)
    return model.to(device) if device is not None else model


def _default_registry() -> Registry:
    from blockspec.registry.loading import load_registry

    return load_registry()
