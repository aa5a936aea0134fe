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
from typing import Annotated, Any, BinaryIO

from attrs import field, frozen

from blockspec.checkpoint.digest import BackgroundDigest
from blockspec.checkpoint.layout import MANIFEST_FILE
from blockspec.checkpoint.safetensors_file import SafetensorsHeader, TensorEntry, iter_tensor_bytes
from blockspec.errors import CheckpointError
from blockspec.outputs.pinned import Opener, PinnedDirectory
from blockspec.spec.documents import structure_document
from blockspec.spec.json_read import read_json_object
from blockspec.spec.validators import Check

FORMAT = "blockspec-checkpoint"
FORMAT_VERSION = 1
MANIFEST_LIMIT = 16 * 1024 * 1024
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SAFE_NAME = "one or two plain parts like 'hf/config.json'"


def _is_safe_name(name: str) -> bool:
    parts = name.split("/")
    return len(parts) <= 2 and all(_PART.fullmatch(p) for p in parts)


Sha256 = Annotated[str, Check(lambda text: bool(_SHA256.fullmatch(text)), "64 lowercase hex digits")]
FormatName = Annotated[str, Check(lambda text: text == FORMAT, repr(FORMAT))]
FormatVersion = Annotated[int, Check(lambda version: version == FORMAT_VERSION,
                                     f"{FORMAT_VERSION} (this blockspec reads version {FORMAT_VERSION})")]
FileName = Annotated[str, Check(_is_safe_name, f"a safe file name: {_SAFE_NAME}")]


@frozen(kw_only=True)
class FileRecord:
    sha256: Sha256
    size: Annotated[int, Check(lambda size: size >= 0, "a byte count")]


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


@frozen(kw_only=True)
class ManifestDocument:
    """manifest.json as written: read through the strict converter, then kept as a Manifest."""

    format: FormatName
    format_version: FormatVersion
    files: dict[FileName, FileRecord]
    tensors: dict[str, Sha256]
    extra: dict[str, Any] = field(factory=dict)


def check_file_name(name: Any) -> str:
    """A relative name of at most two plain parts ("tokenizer.json", "hf/config.json"), or ValueError."""
    if not isinstance(name, str):
        raise ValueError(f"file names must be strings, found {type(name).__name__}")
    if not _is_safe_name(name):
        raise ValueError(f"unsafe file name {name!r}: expected {_SAFE_NAME}")
    return name


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    with open(path, "rb") as handle:
        return sha256_stream(handle, chunk)


def sha256_stream(handle: BinaryIO, chunk: int = 1 << 20) -> str:
    """The sha256 of what is left to read in ``handle``."""
    digest = hashlib.sha256()
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


def read_manifest(directory: Path, *, opener: Opener | None = None) -> Manifest:
    """Parse and validate manifest.json; every defect is a CheckpointError naming the file and $.path.

    ``opener``: a ``PinnedDirectory``'s, to read the manifest of that tree.
    """
    path = directory / MANIFEST_FILE
    data = read_json_object(path, MANIFEST_LIMIT, what="the manifest", hint="; is this a blockspec checkpoint directory?",
                            opener=opener)
    document = structure_document(data, ManifestDocument, file=str(path), error=CheckpointError)
    return Manifest(files=document.files, tensors=document.tensors, extra=document.extra)


# ---------------------------------------------------------------- verifying


def verified_bytes(tree: PinnedDirectory, manifest: Manifest, name: str) -> bytes:
    """The file's bytes, read once, after their size and sha256 match the manifest; else CheckpointError."""
    record = manifest.files.get(name)
    if record is None:
        raise CheckpointError(f"{tree.path / MANIFEST_FILE}: $.files: no record for {name!r}; "
                              "the checkpoint is incomplete or was not written by blockspec.save")
    check_sizes(tree, Manifest(files={name: record}, tensors={}, extra={}))
    with tree.open(name) as handle:
        data = handle.read(record.size + 1)
    if len(data) != record.size or hashlib.sha256(data).hexdigest() != record.sha256:
        raise CheckpointError(f"{tree.path / name}: sha256 differs from the manifest: the file is corrupt or was modified")
    return data


def check_sizes(tree: PinnedDirectory, manifest: Manifest) -> None:
    """Every listed file present with its recorded size: cheap, catches a truncated extra file early."""
    for name, record in manifest.files.items():
        path = tree.path / name
        if not tree.is_file(name):
            raise CheckpointError(f"{path}: listed in the manifest but missing")
        size = tree.stat(name).st_size
        if size != record.size:
            raise CheckpointError(f"{path}: {size} bytes, the manifest records {record.size} (truncated or replaced?)")
