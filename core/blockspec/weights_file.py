"""Load a safetensors weights file into an assembled model, with strict, explained key checks.

Never pickle: safetensors holds tensors only, so an untrusted file cannot run code.
A tied head may be absent from the file (safetensors stores shared storage once).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from .errors import CheckpointError


def load_weights(model: nn.Module, path: str | Path) -> None:
    """Copy every tensor of ``path`` into ``model``; any missing, extra or misshapen tensor is an error."""
    tensors = read_safetensors(path)
    expected = model.state_dict()
    _check_keys(path, expected, tensors, _tied_aliases(model))
    _check_shapes(path, expected, tensors)
    model.load_state_dict(tensors, strict=False)  # strictness checked above, ties allowed


def read_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such weights file; expected a .safetensors file")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path}: not a readable safetensors file ({_first_line(error)})") from error


def _tied_aliases(model: nn.Module) -> dict[str, str]:
    """Parameter name -> the first name sharing its storage (e.g. head.weight -> embedding.weight)."""
    first: dict[int, str] = {}
    aliases = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first:
            aliases[name] = first[id(param)]
        else:
            first[id(param)] = name
    return aliases


def _check_keys(path, expected: dict, found: dict, aliases: dict[str, str]) -> None:
    missing = [k for k in expected if k not in found and not (k in aliases and aliases[k] in found)]
    unexpected = [k for k in found if k not in expected]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensor(s): {_listing(missing)}")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} tensor(s): {_listing(unexpected)}")
        raise CheckpointError(f"{path}: weights do not fit this spec's model; " + "; ".join(parts)
                              + "; check that the spec matches the model the weights were saved from")
    for name, source in aliases.items():
        if name in found and source in found and not torch.equal(found[name], found[source]):
            raise CheckpointError(f"{path}: {name}: tied to {source} in this model, but the file holds different "
                                  "values for the two; use an untied head (tied = false) for these weights")


def _check_shapes(path, expected: dict, found: dict) -> None:
    for name, tensor in found.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(f"{path}: {name}: expected shape {tuple(expected[name].shape)}, "
                                  f"found {tuple(tensor.shape)}; check the spec's sizes")


def _listing(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
