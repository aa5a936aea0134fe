"""blockspec's own checkpoint: a directory that says what the model is, what built it, and its weights.

Layout::

    CKPT/
      spec.toml           the spec, then a [lock] table: "kind:name" -> distribution + version
      model.safetensors   unique tensors only (a tied head is stored once, as embedding.weight)
      manifest.json       sha256 and size of every file, sha256 of every tensor, the caller's ``extra``
      ...                 extra files given to ``save`` (e.g. tokenizer.json, optimizer.safetensors)

The directory is written atomically (see atomic.py) and verified on load: a flipped bit in
the spec or the weights fails the sha256 check before anything is parsed. Weights are only
ever read from safetensors; nothing here unpickles.
"""

from __future__ import annotations

import json
import tomllib
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .atomic import atomic_directory, previous_of
from .convert import dump_spec, structure_spec
from .errors import CheckpointError, SpecError
from .lock import check_lock, lock_of, lock_toml, split_lock
from .manifest import (
    MANIFEST_FILE,
    Manifest,
    check_file_name,
    check_sizes,
    damaged_tensors,
    read_manifest,
    record_files,
    tensor_digests,
    tensor_hasher,
    verify_file,
)
from .modules.transformer import Transformer
from .registry import Registry
from .safetensors_file import SafetensorsHeader, as_tensor, read_bytes, read_header, torch_dtype, write_file
from .spec import ModelSpec
from .weights import build_on_meta, check_layer_count, check_shapes, common_float_dtype, fill, owner_of, unique_state

SPEC_FILE = "spec.toml"
WEIGHTS_FILE = "model.safetensors"
RESERVED = (SPEC_FILE, WEIGHTS_FILE, MANIFEST_FILE)


def save(
    model: Transformer,
    path: str | Path,
    *,
    extra: Mapping[str, Any] | None = None,
    extra_files: Mapping[str, bytes] | None = None,
) -> Path:
    """Write ``model`` as a checkpoint directory at ``path``, atomically; return the path.

    ``extra`` is JSON metadata kept in the manifest (``read_manifest(path).extra``).
    ``extra_files`` maps names ("tokenizer.json", "hf/config.json": one or two plain parts) to
    bytes written beside the model, covered by the manifest and the same atomic write; read
    one back, verified, with ``read_extra_file``. An existing checkpoint at ``path`` is
    replaced atomically; any other existing file or non-empty directory is refused.
    """
    target = Path(path)
    spec = _spec_of(model)
    files = {SPEC_FILE: (dump_spec(spec) + "\n" + lock_toml(lock_of(model))).encode("utf-8")}
    files.update(_checked_extra_files(extra_files))
    _refuse_foreign(target)
    with atomic_directory(target) as staging:
        for name, data in files.items():
            (staging / name).parent.mkdir(exist_ok=True)
            (staging / name).write_bytes(data)
        write_file(unique_state(model), staging / WEIGHTS_FILE, metadata={"format": "pt"})
        manifest = Manifest(files=record_files(staging, [*files, WEIGHTS_FILE]),
                            tensors=tensor_digests(read_header(staging / WEIGHTS_FILE)),
                            extra=_checked_extra(extra))
        (staging / MANIFEST_FILE).write_text(manifest.to_json(), encoding="utf-8")
    return target


def _spec_of(model: Transformer) -> ModelSpec:
    spec = getattr(model, "spec", None)
    if not isinstance(spec, ModelSpec):
        raise CheckpointError("cannot save: the model has no spec; build it with blockspec.build or blockspec.load")
    return spec


def _checked_extra_files(extra_files: Mapping[str, bytes] | None) -> dict[str, bytes]:
    checked = {}
    for name, data in (extra_files or {}).items():
        try:
            check_file_name(name)
        except ValueError as error:
            raise CheckpointError(f"extra_files: {error}") from None
        if name in RESERVED or name.split("/")[0] in RESERVED:
            raise CheckpointError(f"extra_files: {name!r} is reserved for the checkpoint itself")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CheckpointError(f"extra_files[{name!r}]: expected bytes, found {type(data).__name__}")
        checked[name] = bytes(data)
    return checked


def _checked_extra(extra: Mapping[str, Any] | None) -> dict[str, Any]:
    try:
        return json.loads(json.dumps(dict(extra or {}), allow_nan=False))
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"extra: must be JSON-serialisable: {error}") from None


def _refuse_foreign(target: Path) -> None:
    """Replacing a checkpoint is the point; wiping a directory that is not one never is."""
    if not target.exists() and not target.is_symlink():
        return
    if target.is_dir() and not target.is_symlink():
        if (target / MANIFEST_FILE).is_file() or not any(target.iterdir()):
            return
    raise CheckpointError(f"{target}: exists and is not a blockspec checkpoint; refusing to replace it "
                          "(choose another path or remove it yourself)")


# ---------------------------------------------------------------- loading


def load(
    path: str | Path,
    *,
    registry: Registry | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Transformer:
    """Verify and load a checkpoint written by ``save``; the model comes back in eval mode.

    Every file the manifest lists must be there with its recorded size; the spec and the
    weights must match their sha256 (extra files are hashed when ``read_extra_file`` reads
    them). ``dtype`` None keeps the stored floating dtype. Every problem with the weights (missing,
    unexpected or mis-shaped tensors) is reported in one CheckpointError.
    """
    directory = checkpoint_directory(path)
    registry = registry if registry is not None else _default_registry()
    manifest = read_manifest(directory)
    check_sizes(directory, manifest)
    spec = _read_spec(directory, manifest, registry)
    model = _load_weights(directory, manifest, spec, registry)
    model = model.to(dtype=dtype) if dtype is not None else model
    return (model.to(device) if device is not None else model).eval()


def load_spec_of(path: str | Path, registry: Registry | None = None) -> ModelSpec:
    """Just the (verified) spec of a checkpoint: cheap, for ``show`` and friends."""
    directory = checkpoint_directory(path)
    registry = registry if registry is not None else _default_registry()
    return _read_spec(directory, read_manifest(directory), registry)


def read_extra_file(path: str | Path, name: str) -> bytes:
    """One extra file of a checkpoint, after its size and sha256 match the manifest."""
    directory = checkpoint_directory(path)
    try:
        check_file_name(name)
    except ValueError as error:
        raise CheckpointError(str(error)) from None
    return verify_file(directory, read_manifest(directory), name).read_bytes()


def read_checkpoint_manifest(path: str | Path) -> Manifest:
    """The validated manifest: file list, tensor digests, and the ``extra`` given to save."""
    return read_manifest(checkpoint_directory(path))


def checkpoint_directory(path: str | Path) -> Path:
    """The directory to read; the fallback swap's ``.previous`` copy if a kill interrupted it."""
    directory = Path(path)
    if directory.is_dir():
        return directory
    backup = previous_of(directory)
    if not directory.exists() and (backup / MANIFEST_FILE).is_file():
        warnings.warn(f"{directory}: missing; reading the previous checkpoint left at {backup} "
                      "by an interrupted save", UserWarning, stacklevel=3)
        return backup
    what = "not a directory" if directory.exists() else "no such checkpoint directory"
    raise CheckpointError(f"{directory}: {what}")


def _default_registry() -> Registry:
    from .plugins import load_registry

    return load_registry()


def _read_spec(directory: Path, manifest: Manifest, registry: Registry) -> ModelSpec:
    path = verify_file(directory, manifest, SPEC_FILE)
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as error:
        raise CheckpointError(f"{path}: not a valid spec: {type(error).__name__}: {error}") from None
    tables, lock = split_lock(document, str(path))
    check_lock(lock, registry, str(path))
    try:
        return structure_spec(tables, registry, file=str(path))
    except SpecError as error:
        raise CheckpointError(str(error)) from None


def _load_weights(directory: Path, manifest: Manifest, spec: ModelSpec, registry: Registry) -> Transformer:
    path = directory / WEIGHTS_FILE
    try:
        verify_file(directory, manifest, WEIGHTS_FILE)
    except CheckpointError as error:
        raise _name_damaged_tensors(path, manifest, error) from None
    header = read_header(path)
    from .assemble import build

    dtype = common_float_dtype([torch_dtype(e.dtype) for e in header.entries.values()])
    check_layer_count(header.entries, r"^blocks\.(\d+)\.", spec.model.n_layers, str(path), str(directory / SPEC_FILE))
    model = build_on_meta(spec, registry, str(directory / SPEC_FILE))
    expected = {n: tuple(t.shape) for n, t in unique_state(model).items()}
    check_shapes(expected, header.shapes(), str(path), lambda name: owner_of(model, name))
    model = build(spec, registry=registry, dtype=dtype)
    state = unique_state(model)
    _check_dtype_kinds(state, header)
    with open(path, "rb") as handle:
        fill(model, state, lambda name: _verified_tensor(header, name, handle, manifest))
    return model


def _verified_tensor(header: SafetensorsHeader, name: str, handle: Any, manifest: Manifest) -> torch.Tensor:
    """A tensor whose dtype, shape and bytes match its own manifest digest (not only the file's)."""
    entry = header.entries[name]
    data = read_bytes(header, name, handle)
    digest = tensor_hasher(entry)
    digest.update(data)
    if manifest.tensors.get(name) != digest.hexdigest():
        raise CheckpointError(f"{header.path}: tensor {name!r}: dtype, shape or bytes differ from the manifest's "
                              "sha256 for it")
    return as_tensor(entry, data)


def _check_dtype_kinds(state: dict[str, torch.Tensor], header: SafetensorsHeader) -> None:
    """A float parameter is never filled from integers (or the reverse): copy_ would cast silently."""
    lines = [f"{header.path}: tensor {name!r}: expected a {'floating' if t.is_floating_point() else 'non-floating'}"
             f" dtype like {str(t.dtype).removeprefix('torch.')}, found {header.entries[name].dtype}"
             for name, t in state.items()
             if t.is_floating_point() != torch_dtype(header.entries[name].dtype).is_floating_point]
    if lines:
        raise CheckpointError("\n".join(lines))


def _name_damaged_tensors(path: Path, manifest: Manifest, error: CheckpointError) -> CheckpointError:
    """Turn a whole-file mismatch into one line per damaged tensor, when the header still parses."""
    if not path.is_file() or "sha256" not in str(error):
        return error
    try:
        damaged = damaged_tensors(read_header(path), manifest.tensors)
    except CheckpointError as header_error:
        return CheckpointError(f"{error}\n{header_error}")
    if not damaged:
        return CheckpointError(f"{error} (the header differs; every tensor's bytes match)")
    lines = [f"{path}: tensor {name!r}: bytes differ from the manifest's sha256" for name in damaged]
    return CheckpointError("\n".join([str(error), *lines]))
