"""Load a safetensors weights file into an assembled model, with strict, explained key checks.

Never pickle: safetensors holds tensors only, so an untrusted file cannot run code.
A tied head may be absent from the file (safetensors stores shared storage once).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from blockspec.errors import CheckpointError
from blockspec.checkpoint.safetensors_file import SafetensorsHeader, read_header, read_tensor
from blockspec.checkpoint.weights import check_dtypes, check_shapes, fill, header_dtypes, owner_of, tied_aliases


def load_weights(model: nn.Module, path: str | Path) -> None:
    """Copy every tensor of ``path`` into ``model``; all missing, extra and misshapen tensors in one error.

    The header is validated in Python before any tensor is read, as for checkpoints.
    """
    header = _validated_header(Path(path))
    aliases = tied_aliases(model)
    expected = {n: tuple(t.shape) for n, t in model.state_dict().items() if n not in aliases}
    found = {n: shape for n, shape in header.shapes().items() if n not in aliases}
    check_shapes(expected, found, str(path), lambda name: owner_of(model, name))
    check_dtypes({n: t.dtype for n, t in model.state_dict().items()}, header_dtypes(header), str(path))
    tensors = _read_all(header)
    _check_ties(path, tensors, aliases)
    fill(model, ((name, tensor) for name, tensor in tensors.items() if name not in aliases),  # checked above
         source=str(path))


def _validated_header(path: Path) -> SafetensorsHeader:
    if not path.is_file():
        raise CheckpointError(f"{path}: no such weights file; expected a .safetensors file")
    try:
        return read_header(path)
    except CheckpointError as error:
        detail = str(error).removeprefix(f"{path}: ")
        raise CheckpointError(f"{path}: not a readable safetensors file ({detail})") from None


def _read_all(header: SafetensorsHeader) -> dict[str, torch.Tensor]:
    with open(header.path, "rb") as handle:
        return {name: read_tensor(header, name, handle) for name in header.entries}


def _check_ties(path, found: dict[str, torch.Tensor], aliases: dict[str, str]) -> None:
    """A file may hold a tied head under both names (Hugging Face's files do), but only with equal values."""
    for name, source in aliases.items():
        if name in found and source in found and not torch.equal(found[name], found[source]):
            raise CheckpointError(f"{path}: {name}: tied to {source} in this model, but the file holds different "
                                  "values for the two; use an untied head (tied = false) for these weights")
