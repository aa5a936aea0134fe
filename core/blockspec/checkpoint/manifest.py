"""manifest.json of a checkpoint: a sha256 and size per file, and per tensor of the weights.

The per-tensor digests let a damaged weights file be reported tensor by tensor instead of
as one opaque file mismatch. Everything read from a manifest is validated before use: it
names files, and a hostile name must never reach outside the checkpoint directory.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from attrs import frozen

from blockspec.checkpoint.digest import BackgroundDigest
from blockspec.errors import CheckpointError
from blockspec.spec.json_read import read_json_object
from blockspec.checkpoint.safetensors_file import SafetensorsHeader, TensorEntry, iter_tensor_bytes

MANIFEST_FILE = "manifest.json"
FORMAT = "blockspec-checkpoint"
FORMAT_VERSION = 1
MANIFEST_LIMIT = 16 * 1024 * 1024
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@frozen(kw_only=True)
class FileRecord:
    sha256: str
    size: int


@frozen(kw_only=True)
class Manifest:
    """What a checkpoint holds; ``extra`` is the caller's JSON metadata, returned as saved."""

    files: dict[str, FileRecord]
    tensors: dict[str, str]  # tensor name -> sha256 of its dtype, shape and raw bytes (tensor_hasher)
    extra: dict[str, Any]

    def to_json(self) -> str:
        document = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "files": {n: {"sha256": r.sha256, "size": r.size} for n, r in sorted(self.files.items())},
            "tensors": dict(sorted(self.tensors.items())),
            "extra": self.extra,
        }
        return json.dumps(document, indent=1, sort_keys=False, allow_nan=False) + "\n"


def check_file_name(name: Any) -> str:
    """A relative name of at most two plain parts ("tokenizer.json", "hf/config.json"), or ValueError."""
    if not isinstance(name, str):
        raise ValueError(f"file names must be strings, found {type(name).__name__}")
    parts = name.split("/")
    if len(parts) > 2 or not all(_PART.fullmatch(p) for p in parts):
        raise ValueError(f"unsafe file name {name!r}: expected one or two plain parts like 'hf/config.json'")
    return name


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def tensor_hasher(entry: TensorEntry) -> Any:
    """sha256 over a tensor's dtype, shape and raw bytes: a header edit that reinterprets the same
    bytes (F32 -> I32, a swapped shape) changes the digest as surely as a changed byte."""
    return hashlib.sha256(f"{entry.dtype} {list(entry.shape)}\n".encode())


def tensor_digests(header: SafetensorsHeader) -> dict[str, str]:
    """The digest of each tensor, read back from the file as written."""
    return weights_digests(header)[1]


def weights_digests(header: SafetensorsHeader) -> tuple[FileRecord, dict[str, str]]:
    """The file's record and each tensor's digest from one sequential read.

    The validated layout tiles the data section exactly, so the header bytes followed by
    every tensor's bytes in file order are the whole file.
    """
    size = header.path.stat().st_size
    tensors: dict[str, Any] = {}
    with BackgroundDigest() as file_digest:
        with open(header.path, "rb") as handle:
            file_digest.update(handle.read(min((e.start for e in header.entries.values()), default=size)))
        for name, block in iter_tensor_bytes(header):
            file_digest.update(block)
            tensors.setdefault(name, tensor_hasher(header.entries[name])).update(block)
        record = FileRecord(sha256=file_digest.hexdigest(), size=size)
    return record, {name: digest.hexdigest() for name, digest in tensors.items()}


def record_files(directory: Path, names: Iterable[str]) -> dict[str, FileRecord]:
    return {n: FileRecord(sha256=sha256_file(directory / n), size=(directory / n).stat().st_size) for n in names}


# ---------------------------------------------------------------- reading


def read_manifest(directory: Path) -> Manifest:
    """Parse and validate manifest.json; every defect is a CheckpointError naming the file."""
    path = directory / MANIFEST_FILE
    document = _load_json(path)
    _expect(path, document.get("format") == FORMAT, "$.format", f"expected {FORMAT!r}", document.get("format"))
    version = document.get("format_version")
    _expect(path, version == FORMAT_VERSION and type(version) is int, "$.format_version",
            f"expected {FORMAT_VERSION} (this blockspec reads version {FORMAT_VERSION})", version)
    files = _files(path, document.get("files"))
    tensors = _tensors(path, document.get("tensors"))
    extra = document.get("extra", {})
    _expect(path, isinstance(extra, dict), "$.extra", "expected an object", extra)
    return Manifest(files=files, tensors=tensors, extra=extra)


def _load_json(path: Path) -> dict[str, Any]:
    return read_json_object(path, MANIFEST_LIMIT, what="the manifest",
                            hint="; is this a blockspec checkpoint directory?")


def _expect(path: Path, ok: bool, where: str, expected: str, found: Any) -> None:
    if not ok:
        raise CheckpointError(f"{path}: {where}: {expected}, found {_short(found)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _files(path: Path, value: Any) -> dict[str, FileRecord]:
    _expect(path, isinstance(value, dict), "$.files", "expected an object of file records", value)
    files = {}
    for name, record in value.items():
        try:
            check_file_name(name)
        except ValueError as error:
            raise CheckpointError(f"{path}: $.files: {error}") from None
        files[name] = _record(path, f"$.files[{name!r}]", record)
    return files


def _record(path: Path, where: str, record: Any) -> FileRecord:
    _expect(path, isinstance(record, dict) and set(record) == {"sha256", "size"}, where,
            "expected {sha256, size}", record)
    sha, size = record["sha256"], record["size"]
    _expect(path, isinstance(sha, str) and bool(_SHA256.fullmatch(sha)), f"{where}.sha256",
            "expected 64 lowercase hex digits", sha)
    _expect(path, type(size) is int and size >= 0, f"{where}.size", "expected a byte count", size)
    return FileRecord(sha256=sha, size=size)


def _tensors(path: Path, value: Any) -> dict[str, str]:
    _expect(path, isinstance(value, dict), "$.tensors", "expected an object of tensor digests", value)
    for name, sha in value.items():
        _expect(path, isinstance(sha, str) and bool(_SHA256.fullmatch(sha)), f"$.tensors[{name!r}]",
                "expected 64 lowercase hex digits", sha)
    return dict(value)


# ---------------------------------------------------------------- verifying


def verify_file(directory: Path, manifest: Manifest, name: str) -> Path:
    """The file's path once its size and sha256 match the manifest; else CheckpointError."""
    path = directory / name
    record = manifest.files.get(name)
    if record is None:
        raise CheckpointError(f"{directory / MANIFEST_FILE}: $.files: no record for {name!r}; "
                              "the checkpoint is incomplete or was not written by blockspec.save")
    check_sizes(directory, Manifest(files={name: record}, tensors={}, extra={}))
    if sha256_file(path) != record.sha256:
        raise CheckpointError(f"{path}: sha256 differs from the manifest: the file is corrupt or was modified")
    return path


def check_sizes(directory: Path, manifest: Manifest) -> None:
    """Every listed file present with its recorded size: cheap, catches a truncated extra file early."""
    for name, record in manifest.files.items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"{path}: listed in the manifest but missing")
        if path.stat().st_size != record.size:
            raise CheckpointError(f"{path}: {path.stat().st_size} bytes, the manifest records {record.size} "
                                  "(truncated or replaced?)")
