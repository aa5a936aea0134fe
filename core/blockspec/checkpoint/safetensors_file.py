"""safetensors files read defensively: the header is checked in Python before any byte is trusted.

A downloaded weights file is hostile input. The safetensors library validates too, but its
errors are terse and a panic in it is a ``BaseException``; checking the header here first
means every malformed file becomes one ``CheckpointError`` naming the file and the tensor.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from attrs import frozen

from blockspec.errors import CheckpointError

HEADER_LIMIT = 100 * 1024 * 1024  # the safetensors format's own bound on the JSON header
METADATA_KEY = "__metadata__"
DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")


@frozen(kw_only=True)
class TensorEntry:
    """One tensor as the header describes it; ``start``/``end`` are absolute file offsets."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int


@frozen(kw_only=True)
class SafetensorsHeader:
    path: Path
    entries: dict[str, TensorEntry]
    metadata: dict[str, str] | None

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: entry.shape for name, entry in self.entries.items()}


def read_header(path: Path, handle: BinaryIO | None = None) -> SafetensorsHeader:
    """Parse and fully validate the header; raise CheckpointError naming what is wrong.

    Read from ``handle``, an open binary file of ``path``, when given: the caller then reads the tensors
    from the same file, whatever is renamed to ``path`` meanwhile.
    """
    if handle is None:
        try:
            opened = open(path, "rb")
        except OSError as error:
            raise fail(path, f"cannot read weights: {error.strerror}") from None
        with opened:
            return read_header(path, opened)
    size = os.fstat(handle.fileno()).st_size
    handle.seek(0)
    length = _header_length(path, handle.read(8), size)
    document = _parse_json(path, handle.read(length))
    metadata = _metadata(path, document.pop(METADATA_KEY, None))
    data_start = 8 + length
    entries = {name: _entry(path, name, value, data_start) for name, value in document.items()}
    _check_layout(path, entries, data_start, size)
    return SafetensorsHeader(path=path, entries=entries, metadata=metadata)


def fail(path: Path, message: str, tensor: str | None = None) -> CheckpointError:
    where = f"{path}: tensor {tensor!r}" if tensor is not None else str(path)
    return CheckpointError(f"{where}: {message}")


def _header_length(path: Path, prefix: bytes, size: int) -> int:
    if len(prefix) < 8:
        raise fail(path, f"not a safetensors file: {size} bytes, expected at least 8 (truncated?)")
    (length,) = struct.unpack("<Q", prefix)
    if length > HEADER_LIMIT:
        raise fail(path, f"header length {length} exceeds the format's limit of {HEADER_LIMIT} bytes")
    if 8 + length > size:
        raise fail(path, f"header claims {length} bytes but the file has {size - 8} after the prefix (truncated?)")
    return length


def _parse_json(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise fail(path, f"header is not valid JSON: {type(error).__name__}") from None
    if not isinstance(document, dict):
        raise fail(path, f"header must be a JSON object, found {type(document).__name__}")
    return document


def _metadata(path: Path, value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise fail(path, "header __metadata__ must map strings to strings")
    return value


def _entry(path: Path, name: str, value: Any, data_start: int) -> TensorEntry:
    if not isinstance(value, dict) or set(value) != {"dtype", "shape", "data_offsets"}:
        raise fail(path, "expected {dtype, shape, data_offsets} in the header", name)
    dtype, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise fail(path, f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}", name)
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise fail(path, f"shape must be a list of non-negative integers, found {shape!r:.80}", name)
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)):
        raise fail(path, f"data_offsets must be two non-negative integers, found {offsets!r:.80}", name)
    begin, end = offsets
    expected = math.prod(shape) * DTYPE_BYTES[dtype]
    if end - begin != expected:
        raise fail(path, f"data_offsets span {end - begin} bytes, but {dtype} {tuple(shape)} needs {expected}", name)
    return TensorEntry(name=name, dtype=dtype, shape=tuple(shape), start=data_start + begin, end=data_start + end)


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _check_layout(path: Path, entries: dict[str, TensorEntry], data_start: int, size: int) -> None:
    """Tensors must tile the data section exactly: no gap, no overlap, nothing past the end."""
    position = data_start
    for entry in sorted(entries.values(), key=lambda e: (e.start, e.end)):
        if entry.start != position:
            kind = "overlaps the previous tensor" if entry.start < position else "leaves a gap before it"
            raise fail(path, f"data_offsets {kind}", entry.name)
        if entry.end > size:
            raise fail(path, f"data ends at byte {entry.end}, past the end of the file ({size} bytes; truncated?)",
                       entry.name)
        position = entry.end
    if position != size:
        raise fail(path, f"{size - position} bytes after the last tensor that no tensor claims")


def iter_tensor_bytes(header: SafetensorsHeader, chunk: int = 1 << 20) -> Iterator[tuple[str, bytes]]:
    """(name, chunk of its raw bytes) for every tensor, in file order: for per-tensor hashing."""
    with open(header.path, "rb") as handle:
        for entry in sorted(header.entries.values(), key=lambda e: e.start):
            handle.seek(entry.start)
            remaining = entry.end - entry.start
            yield entry.name, b""
            while remaining:
                block = handle.read(min(chunk, remaining))
                if not block:
                    raise fail(header.path, "file shrank while it was read", entry.name)
                remaining -= len(block)
                yield entry.name, block


def read_bytes(header: SafetensorsHeader, name: str, handle: Any) -> bytearray:
    """One tensor's raw bytes from an open binary ``handle`` on the validated file."""
    entry = header.entries[name]
    handle.seek(entry.start)
    data = bytearray(handle.read(entry.end - entry.start))
    if len(data) != entry.end - entry.start:
        raise fail(header.path, "file shrank while it was read", name)
    return data


def read_into(header: SafetensorsHeader, name: str, handle: Any, buffer: memoryview) -> memoryview:
    """Read one tensor's raw bytes into ``buffer`` (exactly its size); returns ``buffer``."""
    entry = header.entries[name]
    if len(buffer) != entry.end - entry.start:
        raise ValueError(f"tensor {name!r}: {entry.end - entry.start} bytes do not fit a {len(buffer)}-byte buffer")
    handle.seek(entry.start)
    if handle.readinto(buffer) != len(buffer):
        raise fail(header.path, "file shrank while it was read", name)
    return buffer


def writable_bytes(tensor: Any) -> memoryview:
    """A contiguous CPU tensor's memory as a writable byte buffer, without numpy."""
    size = tensor.numel() * tensor.element_size()
    if size == 0:
        return memoryview(bytearray())
    return memoryview((ctypes.c_char * size).from_address(tensor.data_ptr())).cast("B")


def read_tensor(header: SafetensorsHeader, name: str, handle: Any) -> Any:
    """One tensor from an open binary ``handle`` on the validated file, as a CPU torch tensor."""
    return as_tensor(header.entries[name], read_bytes(header, name, handle))


def as_tensor(entry: TensorEntry, data: bytearray) -> Any:
    import torch

    dtype = torch_dtype(entry.dtype)
    if not data:
        return torch.empty(entry.shape, dtype=dtype)
    return torch.frombuffer(data, dtype=dtype).view(entry.shape)  # (*shape)


def torch_dtype(name: str) -> Any:
    import torch

    return {
        "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
        "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
        "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
        "U64": torch.uint64, "U32": torch.uint32, "U16": torch.uint16, "U8": torch.uint8, "BOOL": torch.bool,
    }[name]


def write_file(tensors: dict[str, Any], path: Path, metadata: dict[str, str] | None = None) -> None:
    """Write with the reference implementation; tensors must not share storage (the caller dedups).

    The library reports a failed write (a full disk) as a SafetensorError carrying the OS's
    error number in its text: it is raised again as the OSError it was, so the writer above
    (``atomic_directory``) names the output and the space.
    """
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    contiguous = {name: tensor.detach().contiguous() for name, tensor in tensors.items()}
    try:
        save_file(contiguous, str(path), metadata=metadata)
    except SafetensorError as error:
        code = re.search(r"\(os error (\d+)\)", str(error))
        if code is None:
            raise
        raise OSError(int(code[1]), os.strerror(int(code[1])), str(path)) from error
