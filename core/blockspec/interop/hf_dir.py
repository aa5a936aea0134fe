"""A local directory in the Hugging Face layout (its names: hf_layout.py): config.json and the weights, safely.

Weights come from ``model.safetensors`` (or its sharded ``.index.json`` form). A
``pytorch_model.bin`` is a pickle: it is read only when the caller opts in, and then with
``torch.load(weights_only=True)``. It is never a fallback for a missing or broken
safetensors file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import torch

from blockspec.errors import CheckpointError, Problem
from blockspec.spec.json_read import json_object
from blockspec.checkpoint.manifest import check_file_name
from blockspec.checkpoint.safetensors_file import SafetensorsHeader, read_header, read_tensor, torch_dtype
from blockspec.interop.hf_layout import CONFIG, SAFETENSORS, hf_file, read_hf_file

PICKLES = ("pytorch_model.bin", "model.pt", "model.bin")
JSON_LIMIT = 16 * 1024 * 1024  # a config.json is kilobytes, the index of a 400B model's shards under 1 MB


def read_json(directory: Path, name: str) -> dict[str, Any]:
    """A bounded JSON object of the directory (read inside it: hf_layout), or CheckpointError naming the file."""
    return json_object(read_hf_file(directory, name, JSON_LIMIT), directory / name)


def read_config(directory: Path) -> dict[str, Any]:
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: not a directory (expected a Hugging Face model directory)")
    if not os.path.lexists(directory / CONFIG):
        raise CheckpointError(f"{directory}: no {CONFIG}; expected a Hugging Face model directory")
    return read_json(directory, CONFIG)


class WeightSource:
    """Tensor names, shapes and dtypes up front; the bytes only when ``read`` asks."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, torch.dtype], reader: Any) -> None:
        self.shapes, self.dtypes, self._reader = shapes, dtypes, reader

    def read(self, name: str) -> torch.Tensor:
        return self._reader(name)


@contextmanager
def open_weights(directory: Path, *, allow_pickle: bool = False) -> Iterator[WeightSource]:
    """The directory's weights; safetensors always wins, pickles need ``allow_pickle``."""
    shards = _safetensors_shards(directory)
    if shards:
        with ExitStack() as stack:
            yield _safetensors_source(shards, stack)
        return
    pickle_path = next((hf_file(directory, n) for n in PICKLES if os.path.lexists(directory / n)), None)
    if pickle_path is None:
        raise CheckpointError(f"{directory}: no weights: expected {SAFETENSORS} (or a sharded "
                              f"{SAFETENSORS}.index.json)")
    if not allow_pickle:
        raise CheckpointError(Problem(
            file=str(pickle_path), message="is a pickle, which can run code when loaded; refusing to read it. "
            "Convert it to safetensors, or {allow_pickle}",
            names={"allow_pickle": "opt in with allow_pickle=True to read it with torch.load(weights_only=True)"}))
    yield _pickle_source(pickle_path)


def _safetensors_shards(directory: Path) -> list[Path]:
    """The weights files, each a regular file inside the directory (hf_layout.hf_file)."""
    if os.path.lexists(directory / SAFETENSORS):
        return [hf_file(directory, SAFETENSORS)]
    index = directory / f"{SAFETENSORS}.index.json"
    if not os.path.lexists(index):
        return []
    weight_map = read_json(directory, index.name).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index}: $.weight_map: expected an object of tensor name -> shard file")
    names = sorted(set(weight_map.values()), key=str)
    for name in names:
        if not isinstance(name, str) or "/" in name or not _plain(name):
            raise CheckpointError(f"{index}: $.weight_map: unsafe shard file name {name!r:.80}")
    return [hf_file(directory, name) for name in names]


def _plain(name: str) -> bool:
    try:
        check_file_name(name)
    except ValueError:
        return False
    return True


def _safetensors_source(shards: list[Path], stack: ExitStack) -> WeightSource:
    headers: dict[str, SafetensorsHeader] = {}
    for shard in shards:
        header = read_header(shard)
        for name in header.entries:
            if name in headers:
                raise CheckpointError(f"{shard}: tensor {name!r}: also in {headers[name].path}")
            headers[name] = header
    handles: dict[Path, BinaryIO] = {}

    def read(name: str) -> torch.Tensor:
        header = headers[name]
        if header.path not in handles:
            handles[header.path] = stack.enter_context(open(header.path, "rb"))
        return read_tensor(header, name, handles[header.path])

    shapes = {n: h.entries[n].shape for n, h in headers.items()}
    dtypes = {n: torch_dtype(h.entries[n].dtype) for n, h in headers.items()}
    return WeightSource(shapes, dtypes, read)


def _pickle_source(path: Path) -> WeightSource:
    """torch.load with weights_only=True: only tensors and plain containers are ever built."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # any failure of a hostile pickle is the file's fault: report it
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CheckpointError(f"{path}: refused by torch.load(weights_only=True): "
                              f"{type(error).__name__}: {first:.200}") from None
    if not isinstance(state, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()):
        raise CheckpointError(f"{path}: expected a mapping of tensor names to tensors")
    return WeightSource({k: tuple(v.shape) for k, v in state.items()},
                        {k: v.dtype for k, v in state.items()}, state.__getitem__)
