"""Filling a model from a checkpoint's model.safetensors, verified in a single pass over the file.

The header is validated in Python (safe on hostile bytes) and checked against the spec on
the meta device before anything is allocated. Then one sequential read feeds both the
whole-file sha256 and each tensor's own digest (dtype, shape, bytes) while the tensors are
copied in. A damaged tensor is named; a damaged header fails the file digest. Whenever
parsing or checking fails, the file digest decides whether the message says "corrupt".

The file is opened once, by the caller: header, tensors and digests all come from that one file.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import torch

from blockspec.checkpoint.digest import BackgroundDigest
from blockspec.errors import CheckpointError
from blockspec.checkpoint.manifest import Manifest, sha256_stream, tensor_hasher
from blockspec.modules.transformer import Transformer
from blockspec.registry.components import Registry
from blockspec.checkpoint.safetensors_file import (SafetensorsHeader, TensorEntry, as_tensor, read_bytes, read_header, read_into,
                               torch_dtype, writable_bytes)
from blockspec.spec.schema import ModelSpec
from blockspec.checkpoint.weights import (build_on_meta, check_dtypes, check_layer_count, check_shapes, common_float_dtype,
                      header_dtypes, owner_of, unique_state)

LAYER_INDEX = r"^blocks\.(\d+)\."


def load_verified_weights(path: Path, handle: BinaryIO, manifest: Manifest, spec: ModelSpec, registry: Registry,
                          spec_file: str) -> Transformer:
    """The model ``spec`` describes, filled from ``handle`` (open on ``path``); CheckpointError on any mismatch."""
    from blockspec.assembly.assemble import build_unfilled

    record = manifest.files.get(path.name)
    if record is None:
        raise CheckpointError(f"{path.parent / 'manifest.json'}: $.files: no record for {path.name!r}")
    try:
        header = _checked_header(path, handle, spec, registry, spec_file)
    except CheckpointError as error:
        raise _corrupt_or(error, path, handle, record.sha256) from None
    model = build_unfilled(spec, registry=registry, dtype=common_float_dtype([torch_dtype(e.dtype)
                                                                              for e in header.entries.values()]))
    _fill_and_verify(unique_state(model), header, handle, manifest, record.sha256)
    return model


def fill_verified_adapters(path: Path, handle: BinaryIO, manifest: Manifest, model: Transformer) -> None:
    """Fill ``model``'s adapter tensors (``adapter_state``) from an adapter checkpoint's file, verified as the
    weights are: every adapter tensor there with its shape and kind of dtype, nothing else, each digest matching."""
    from blockspec.modules.adapter import adapter_state

    record = manifest.files.get(path.name)
    if record is None:
        raise CheckpointError(f"{path.parent / 'manifest.json'}: $.files: no record for {path.name!r}")
    state = {name: tensor.data for name, tensor in adapter_state(model).items()}
    try:
        header = read_header(path, handle)
        check_shapes({n: tuple(t.shape) for n, t in state.items()}, header.shapes(), str(path))
        check_dtypes({n: t.dtype for n, t in state.items()}, header_dtypes(header), str(path))
    except CheckpointError as error:
        raise _corrupt_or(error, path, handle, record.sha256) from None
    _fill_and_verify(state, header, handle, manifest, record.sha256)


def _checked_header(path: Path, handle: BinaryIO, spec: ModelSpec, registry: Registry, spec_file: str
                    ) -> SafetensorsHeader:
    header = read_header(path, handle)
    check_layer_count(header.entries, LAYER_INDEX, spec.model.n_layers, str(path), spec_file)
    meta = build_on_meta(spec, registry, spec_file)
    state = unique_state(meta)
    check_shapes({n: tuple(t.shape) for n, t in state.items()}, header.shapes(), str(path),
                 lambda name: owner_of(meta, name))
    check_dtypes({n: t.dtype for n, t in state.items()}, header_dtypes(header), str(path))  # before any byte is read
    return header


def _corrupt_or(error: CheckpointError, path: Path, handle: BinaryIO, sha256: str) -> CheckpointError:
    """Say "corrupt" first when the bytes are not the ones the manifest recorded."""
    handle.seek(0)
    if sha256_stream(handle) != sha256:
        return CheckpointError(f"{path}: sha256 differs from the manifest: the file is corrupt or was modified\n"
                               f"{error}")
    return error


def _fill_and_verify(state: dict[str, torch.Tensor], header: SafetensorsHeader, handle: BinaryIO,
                     manifest: Manifest, sha256: str) -> None:
    """One read of the file: its digest, each tensor's digest, and the copy into the model.

    A damaged tensor may already be in the model when it is found: the error then discards it.
    """
    damaged = []
    handle.seek(0)
    with BackgroundDigest() as whole, torch.no_grad():
        whole.update(handle.read(min(e.start for e in header.entries.values()) if header.entries else 0))
        for entry in sorted(header.entries.values(), key=lambda e: e.start):
            data = _read_into_model(state[entry.name], entry, header, handle)
            whole.update(data)
            digest = tensor_hasher(entry)
            digest.update(data)
            if manifest.tensors.get(entry.name) != digest.hexdigest():
                damaged.append(entry.name)
        whole.update(handle.read())
        file_differs = whole.hexdigest() != sha256
    _raise_if_damaged(header.path, damaged, file_differs)


def _read_into_model(target: torch.Tensor, entry: TensorEntry, header: SafetensorsHeader, handle) -> memoryview:
    """The tensor's bytes, read straight into ``target``'s memory when the layouts agree (no copies)."""
    if target.dtype == torch_dtype(entry.dtype) and target.is_contiguous() and target.device.type == "cpu":
        return read_into(header, entry.name, handle, writable_bytes(target))
    data = read_bytes(header, entry.name, handle)
    target.copy_(as_tensor(entry, data))  # a cast: the model's dtype is not the file's
    return memoryview(data)


def _raise_if_damaged(path: Path, damaged: list[str], file_differs: bool) -> None:
    if not damaged and not file_differs:
        return
    lines = [f"{path}: sha256 differs from the manifest: the file is corrupt or was modified"]
    lines += [f"{path}: tensor {name!r}: dtype, shape or bytes differ from the manifest's sha256" for name in damaged]
    if not damaged:
        lines[0] += " (the header differs; every tensor's bytes match)"
    raise CheckpointError("\n".join(lines))
