"""blockspec's own checkpoint: a directory that says what the model is, what built it, and its weights.

Layout (the names: layout.py)::

    CKPT/
      spec.toml           the spec, then a [lock] table: "kind:name" -> distribution + version
      model.safetensors   unique tensors only (a tied head is stored once, as embedding.weight)
      manifest.json       sha256 and size of every file, sha256 of every tensor, the caller's ``extra``
      hf/...              the Hugging Face files the model carries (``model.carried``)

An adapter checkpoint (a model with [[adapters]] and a ``model.base``: adapters trained over a base
checkpoint) writes ``adapter.safetensors``, its adapters' tensors only, and ``base.json`` (base_ref.py)
instead of model.safetensors and hf/: loading it loads the base, refuses one whose content changed,
wraps it as the spec says and fills the adapters.
      ...                 extra files given to ``save`` (e.g. tokenizer.json, optimizer.safetensors)

The directory is written atomically and exclusively (see atomic.py): an existing checkpoint
is only ever replaced with ``overwrite=True``. It is verified on load: a flipped bit in
the spec or the weights fails the sha256 check before anything is parsed. Weights are only
ever read from safetensors; nothing here unpickles.

A reader pins the directory (``outputs/pinned.py``): everything one call reads (manifest, spec,
weights, carried files) comes from the tree the path named when it began, however often another
process replaces the checkpoint meanwhile.
"""

from __future__ import annotations

import json
import os
import tomllib
import warnings
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import torch

from blockspec.checkpoint.atomic import atomic_directory, previous_of
from blockspec.checkpoint.base_ref import (BaseReference, base_json, base_reference, check_same_base,
                                           is_adapter_checkpoint, read_base_json)
from blockspec.checkpoint.contained import contained_file
from blockspec.outputs.targets import check_writable_target
from blockspec.registry.specs import structure_spec
from blockspec.spec.convert import dump_spec
from blockspec.errors import CheckpointError, InputError, Problem, SpecError
from blockspec.outputs.lock import folder_lock
from blockspec.checkpoint.lock import check_lock, lock_of, lock_toml, preferences, split_lock
from blockspec.checkpoint.layout import (
    ADAPTER_FILE,
    BASE_FILE,
    CHECKPOINT,
    MANIFEST_FILE,
    RESERVED,
    SPEC_FILE,
    TRAINING_FILES,
    WEIGHTS_FILE,
    CARRIED_PREFIX,
    carried_entries,
    carried_names,
    is_checkpoint,
)
from blockspec.checkpoint.manifest import (
    Manifest,
    check_file_name,
    check_sizes,
    read_manifest,
    record_files,
    verified_bytes,
    weights_digests,
)
from blockspec.modules.transformer import Transformer
from blockspec.registry.components import Registry
from blockspec.checkpoint.safetensors_file import read_header, write_file
from blockspec.spec.schema import ModelSpec
from blockspec.checkpoint.verified_weights import fill_verified_adapters, load_verified_weights
from blockspec.checkpoint.weights import unique_state
from blockspec.outputs.pinned import PinnedDirectory, pinned_directory



def save(
    model: Transformer,
    path: str | Path,
    *,
    extra: Mapping[str, Any] | None = None,
    extra_files: Mapping[str, bytes] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``model`` as a checkpoint directory at ``path``, atomically; return the path.

    ``extra`` is JSON metadata kept in the manifest (``read_manifest(path).extra``).
    ``extra_files`` maps names ("tokenizer.json", "hf/config.json": one or two plain parts) to
    bytes written beside the model, covered by the manifest and the same atomic write; read
    one back, verified, with ``read_extra_file``. The Hugging Face files the model carries
    (``model.carried``) are written as ``hf/`` files, unless ``extra_files`` names them itself.

    An existing checkpoint at ``path`` is refused (``OutputExistsError``) unless ``overwrite``,
    then replaced atomically: the old one stays until the new one is complete. Creating is
    exclusive: of two processes saving to the same new path, one wins, the other is refused.
    Any other existing file or non-empty directory is always refused; an empty directory is taken.

    A model with adapters and a ``base`` (a ``BaseReference``: ``blockspec.load`` of an adapter checkpoint sets
    it, adapter training too) is saved as an adapter checkpoint: its adapters only, no hf/ files (the base has them).
    """
    target = _folder(path)
    spec = _spec_of(model)
    base = _adapted_base(model)
    files = {SPEC_FILE: (dump_spec(spec) + "\n" + lock_toml(lock_of(model))).encode("utf-8")}
    files.update(_checked_extra_files({**carried_entries(getattr(model, "carried", {})), **(extra_files or {})}))
    if base is not None:
        files = {name: data for name, data in files.items() if not name.startswith(CARRIED_PREFIX)}
        files[BASE_FILE] = base_json(base, target)
    with folder_lock(target):  # checked under the lock: another writer's swap is never seen half-done
        check_writable_target(target, kind=CHECKPOINT, overwrite=overwrite)
        with atomic_directory(target, overwrite=overwrite) as staging:
            _write_checkpoint(staging, model, files, extra, adapters_only=base is not None)
    return target


def _adapted_base(model: Transformer) -> BaseReference | None:
    """The base an adapter checkpoint of ``model`` refers to; None for a model saved whole."""
    base = getattr(model, "base", None)
    if base is None or not getattr(model, "adapted", None):
        return None
    if not isinstance(base, BaseReference):
        raise CheckpointError(f"cannot save: model.base is a {type(base).__name__}, not a BaseReference "
                              "(blockspec.checkpoint.base_ref.base_reference(path) makes one)")
    return base


def _write_checkpoint(staging: Path, model: Transformer, files: Mapping[str, bytes],
                      extra: Mapping[str, Any] | None, *, adapters_only: bool) -> None:
    """The checkpoint's files in ``staging``: the given ones, the weights (or the adapters), and their manifest."""
    from blockspec.modules.adapter import adapter_state

    for name, data in files.items():
        (staging / name).parent.mkdir(exist_ok=True)
        (staging / name).write_bytes(data)
    weights_file, state = (ADAPTER_FILE, adapter_state(model)) if adapters_only else (WEIGHTS_FILE, unique_state(model))
    write_file(state, staging / weights_file, metadata={"format": "pt"})
    weights_record, tensors = weights_digests(read_header(staging / weights_file))
    records = {**record_files(staging, files), weights_file: weights_record}
    manifest = Manifest(files=records, tensors=tensors, extra=_checked_extra(extra))
    (staging / MANIFEST_FILE).write_text(manifest.to_json(), encoding="utf-8")


def _folder(path: object) -> Path:
    """The checkpoint's folder; anything but a path is refused by name, not with a TypeError from os."""
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(Problem(path="path", expected="a folder to write the checkpoint to (a str or a Path)",
                                 found=type(path).__name__))
    return Path(path)


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


# ---------------------------------------------------------------- loading


def load(
    path: str | Path,
    *,
    registry: Registry | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Transformer:
    """Verify and load a checkpoint written by ``save``.

    The model comes back in training mode, as ``build`` returns it and as PyTorch builds every
    module: ``.eval()`` before inference. (``blockspec.load`` also reads Hugging Face directories.)

    Every file the manifest lists must be there with its recorded size, except the training
    files (``TRAINING_FILES``: optimizer state and history, which generation does not need),
    which may be absent; the spec and the weights must match their sha256 (extra files are
    hashed when ``read_extra_file`` reads them, and a missing one is an error then). ``dtype`` None keeps the stored floating dtype. Every problem with the weights (missing,
    unexpected or mis-shaped tensors) is reported in one CheckpointError.
    """
    registry = registry if registry is not None else _default_registry()
    with pinned_checkpoint(path) as tree:
        manifest = _manifest(tree)
        check_sizes(tree, _without_absent_training_files(tree, manifest))
        spec = _read_spec(tree, manifest, registry)
        if is_adapter_checkpoint(manifest):
            model = _adapted(tree, manifest, spec, registry, given=Path(path))
        else:
            with tree.open(WEIGHTS_FILE) as weights:
                model = load_verified_weights(tree.path / WEIGHTS_FILE, weights, manifest, spec, registry,
                                              str(tree.path / SPEC_FILE))
            model.carried = _carried(tree, manifest)
    model = model.to(dtype=dtype) if dtype is not None else model
    return model.to(device) if device is not None else model


def _adapted(tree: PinnedDirectory, manifest: Manifest, spec: ModelSpec, registry: Registry, *,
             given: Path) -> Transformer:
    """An adapter checkpoint's model: its base loaded (verified, the same content as recorded), wrapped as the
    spec's [[adapters]] say, the adapters filled from adapter.safetensors; it keeps the base's carried files."""
    from blockspec.assembly.assemble import adapt

    recorded = read_base_json(verified_bytes(tree, manifest, BASE_FILE), given)
    base = _base_model(recorded, given, registry)
    _check_base_spec(base.spec, spec, recorded, given)
    model = adapt(base, spec, registry)
    with tree.open(ADAPTER_FILE) as adapters:
        fill_verified_adapters(tree.path / ADAPTER_FILE, adapters, manifest, model)
    model.base = recorded
    return model


def _base_model(recorded: BaseReference, adapters: Path, registry: Registry) -> Transformer:
    """The base checkpoint's model, once its manifest says it holds what the adapters were trained on."""
    if not is_checkpoint(recorded.path):
        raise CheckpointError(Problem(file=str(adapters / BASE_FILE), path="$.path",
                                      message=f"the base checkpoint {recorded.path} is not there",
                                      hint="these adapters need the base they were trained on: put it back at that "
                                           "path (base.json's path is relative to the adapter checkpoint)"))
    check_same_base(recorded, base_reference(recorded.path), adapters=adapters)  # its manifest: before its weights
    return load(recorded.path, registry=registry)


def _check_base_spec(base: ModelSpec, adapted: ModelSpec, recorded: BaseReference, adapters: Path) -> None:
    """The adapter checkpoint's spec is its base's plus [[adapters]]: anything else was not written by ``save``."""
    from blockspec.spec.convert import spec_to_dict

    without = {k: v for k, v in spec_to_dict(adapted).items() if k != "adapters"}
    if without != spec_to_dict(base):
        raise CheckpointError(Problem(file=str(adapters / SPEC_FILE), message=f"differs from its base's spec "
                                      f"({recorded.path}) by more than its [[adapters]]"))


def _without_absent_training_files(tree: PinnedDirectory, manifest: Manifest) -> Manifest:
    files = {name: record for name, record in manifest.files.items()
             if name not in TRAINING_FILES or tree.lexists(name)}
    return Manifest(files=files, tensors=manifest.tensors, extra=manifest.extra)


def load_spec_of(path: str | Path, registry: Registry | None = None) -> ModelSpec:
    """Just the (verified) spec of a checkpoint: cheap, for ``show`` and friends."""
    registry = registry if registry is not None else _default_registry()
    with pinned_checkpoint(path) as tree:
        return _read_spec(tree, _manifest(tree), registry)


def read_extra_file(path: str | Path, name: str) -> bytes:
    """One extra file of a checkpoint, after its size and sha256 match the manifest (and it is a regular file
    inside the checkpoint: ``contained``)."""
    try:
        check_file_name(name)
    except ValueError as error:
        raise CheckpointError(str(error)) from None
    with pinned_checkpoint(path) as tree:
        return _verified_inside(tree, _manifest(tree), name)


def read_carried(path: str | Path) -> dict[str, bytes]:
    """The Hugging Face files a checkpoint carries, by their own name ("config.json"), each verified and read
    inside the checkpoint (a link out of it is refused, whatever the manifest says)."""
    with pinned_checkpoint(path) as tree:
        return _carried(tree, _manifest(tree))


def _carried(tree: PinnedDirectory, manifest: Manifest) -> dict[str, bytes]:
    names = carried_names(manifest.files)
    return {name.removeprefix(CARRIED_PREFIX): _verified_inside(tree, manifest, name) for name in names}


def _verified_inside(tree: PinnedDirectory, manifest: Manifest, name: str) -> bytes:
    """``verified_bytes``, for a file that is a regular file inside the checkpoint (a missing one: the manifest says)."""
    if tree.lexists(name):
        contained_file(tree.path / name, (Path(os.path.realpath(tree.path)),))
    return verified_bytes(tree, manifest, name)


def read_checkpoint_manifest(path: str | Path) -> Manifest:
    """The validated manifest: file list, tensor digests, and the ``extra`` given to save."""
    return read_manifest(checkpoint_directory(path))


def checkpoint_directory(path: str | Path) -> Path:
    """The directory to read; the fallback swap's ``.previous`` copy if a kill interrupted it."""
    directory = Path(path)
    if directory.is_dir():
        return directory
    backup = previous_of(directory)
    if not directory.exists() and is_checkpoint(backup):
        warnings.warn(f"{directory}: missing; reading the previous checkpoint left at {backup} "
                      "by an interrupted save", UserWarning, stacklevel=3)
        return backup
    what = "not a directory" if directory.exists() else "no such checkpoint directory"
    raise CheckpointError(f"{directory}: {what}")


@contextmanager
def pinned_checkpoint(path: str | Path) -> Iterator[PinnedDirectory]:
    """The checkpoint directory at ``path``, pinned: every file read through it comes from one save."""
    directory = checkpoint_directory(path)
    with ExitStack() as stack:
        try:
            tree = stack.enter_context(pinned_directory(directory))
        except OSError as error:
            raise CheckpointError(f"{directory}: cannot read the checkpoint: {error.strerror}") from None
        yield tree


def _manifest(tree: PinnedDirectory) -> Manifest:
    return read_manifest(tree.path, opener=tree.opener)


def _default_registry() -> Registry:
    from blockspec.registry.loading import load_registry

    return load_registry()


def _read_spec(tree: PinnedDirectory, manifest: Manifest, registry: Registry) -> ModelSpec:
    path, data = tree.path / SPEC_FILE, verified_bytes(tree, manifest, SPEC_FILE)
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as error:
        raise CheckpointError(f"{path}: not a valid spec: {type(error).__name__}: {error}") from None
    try:
        return locked_spec(document, registry, file=str(path))
    except SpecError as error:
        raise CheckpointError(error.problems) from None


def locked_spec(document: dict[str, Any], registry: Registry, *, file: str, text: str | None = None) -> ModelSpec:
    """A parsed spec.toml with an optional [lock] table -> the spec, read as the lock says.

    The lock is checked against ``registry`` first (a missing component is a CheckpointError,
    another version a warning); then the spec's tables are structured (SpecError) with ties
    broken, and pinned, as the lock records. Used for checkpoints and for a spec.toml on its own.
    """
    tables, lock = split_lock(document, file)
    check_lock(lock, registry, file)
    return structure_spec(tables, registry, file=file, text=text, prefer=preferences(lock))
