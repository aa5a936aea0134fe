"""Training checkpoints as a directory, written atomically; safetensors and JSON, never pickle.

Layout: spec.toml, tokenizer.json, model.safetensors (unique tensors: a tied head is
stored once, as the embedding), optimizer.safetensors (AdamW moments keyed by parameter
name, plus the RNG state) and training.json (step, settings, loss history, param groups).

A write goes to a temporary directory beside the target, is fsynced, and renamed into
place; the previous checkpoint is moved aside first and removed last. A kill at any
moment leaves either the new checkpoint or the previous one (``.NAME.old``), which
``resolve`` finds.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from attrs import frozen
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..convert import dump_spec, loads_spec
from ..errors import CheckpointError, SpecError
from ..registry import Registry
from ..spec import ModelSpec
from ..tokenizer import CharTokenizer, TokenizerError

FORMAT = "blockspec-train-checkpoint"
VERSION = 1
FILES = ("spec.toml", "tokenizer.json", "model.safetensors", "optimizer.safetensors", "training.json")


@frozen(kw_only=True)
class Checkpoint:
    """Everything a checkpoint holds, as plain tensors and data (no modules)."""

    spec: ModelSpec
    tokenizer: CharTokenizer
    model_state: dict[str, torch.Tensor]
    optimizer_state: dict[str, Any]  # {"state": {name: {key: tensor}}, "param_groups": [{..., "params": [name]}]}
    rng_state: torch.Tensor | None
    training: dict[str, Any]  # step, settings, history

    @property
    def step(self) -> int:
        return int(self.training["step"])


# ---------------------------------------------------------------- writing


def save_checkpoint(path: str | Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint`` to the directory ``path`` atomically; returns the path."""
    return write_atomically(Path(path), lambda directory: _write_files(directory, checkpoint))


def _write_files(directory: Path, checkpoint: Checkpoint) -> None:
    (directory / "spec.toml").write_text(dump_spec(checkpoint.spec), encoding="utf-8")
    (directory / "tokenizer.json").write_text(json.dumps(checkpoint.tokenizer.to_dict()), encoding="utf-8")
    save_file(_contiguous(checkpoint.model_state), directory / "model.safetensors", metadata={"format": "pt"})
    tensors, groups = flatten_optimizer_state(checkpoint.optimizer_state)
    if checkpoint.rng_state is not None:
        tensors["rng/cpu"] = checkpoint.rng_state
    save_file(_contiguous(tensors), directory / "optimizer.safetensors", metadata={"format": "pt"})
    training = {"format": FORMAT, "version": VERSION, **checkpoint.training, "param_groups": groups}
    (directory / "training.json").write_text(json.dumps(training, indent=1), encoding="utf-8")


def write_atomically(target: Path, write: Callable[[Path], None]) -> Path:
    """Fill a fresh temporary directory beside ``target`` with ``write``, fsync it, rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(target)
    temporary = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        write(temporary)
        _publish(temporary)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    previous = _previous(target)
    if target.exists():
        shutil.rmtree(previous, ignore_errors=True)  # stale: target is newer and complete
        os.rename(target, previous)  # from here until the next rename, only `previous` exists
    os.rename(temporary, target)
    _fsync_directory(target.parent)
    shutil.rmtree(previous, ignore_errors=True)
    return target


def _previous(target: Path) -> Path:
    return target.parent / f".{target.name}.old"


def _remove_stale_temporaries(target: Path) -> None:
    """Temporaries left by a killed writer are never complete checkpoints."""
    for stale in target.parent.glob(f".{target.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)


def _publish(directory: Path) -> None:
    """Give the files the permissions of ordinary ones (mkdtemp makes 0700), and fsync them all."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(directory, 0o777 & ~mask)
    for file in directory.iterdir():
        os.chmod(file, 0o666 & ~mask)
        descriptor = os.open(file, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
    _fsync_directory(directory)


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _contiguous(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().cpu().contiguous() for name, tensor in tensors.items()}


# ---------------------------------------------------------------- the optimizer's state as tensors + JSON


def flatten_optimizer_state(state: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """Name-keyed optimizer state -> tensors "state/<param>/<key>" and JSON-able param groups."""
    tensors = {}
    for name, entries in state["state"].items():
        for key, value in entries.items():
            if not isinstance(value, torch.Tensor):
                value = torch.tensor(value)
            tensors[f"state/{name}/{key}"] = value
    return tensors, [dict(group) for group in state["param_groups"]]


def unflatten_optimizer_state(tensors: Mapping[str, torch.Tensor], groups: list[dict[str, Any]]) -> dict[str, Any]:
    state: dict[str, dict[str, torch.Tensor]] = {}
    for flat, tensor in tensors.items():
        if flat.startswith("state/"):
            name, key = flat[len("state/") :].rsplit("/", 1)
            state.setdefault(name, {})[key] = tensor
    groups = [{**group, "betas": tuple(group["betas"])} if "betas" in group else group for group in groups]
    return {"state": state, "param_groups": groups}


# ---------------------------------------------------------------- reading


def resolve(path: str | Path) -> Path:
    """The directory to read: ``path``, or the previous checkpoint a kill left beside it."""
    path = Path(path)
    for candidate in (path, _previous(path)):
        if (candidate / "training.json").is_file() or (candidate / "model.safetensors").is_file():
            return candidate
    raise CheckpointError(f"{path}: no checkpoint here (expected a directory holding {', '.join(FILES)}); "
                          "pass a directory written by `blockspec train --out`")


def load_checkpoint(path: str | Path, registry: Registry | None = None) -> Checkpoint:
    """Read every part of a training checkpoint; any missing or corrupt file is a CheckpointError."""
    directory = resolve(path)
    training = _read_json(directory / "training.json")
    if training.get("format") != FORMAT:
        raise CheckpointError(f"{directory / 'training.json'}: expected format {FORMAT!r}, "
                              f"found {training.get('format')!r}")
    optimizer_tensors = _read_tensors(directory / "optimizer.safetensors")
    return Checkpoint(
        spec=read_spec(directory, registry),
        tokenizer=read_tokenizer(directory),
        model_state=_read_tensors(directory / "model.safetensors"),
        optimizer_state=unflatten_optimizer_state(optimizer_tensors, training.pop("param_groups", [])),
        rng_state=optimizer_tensors.get("rng/cpu"),
        training=training,
    )


def read_spec(directory: Path, registry: Registry | None = None) -> ModelSpec:
    file = directory / "spec.toml"
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise CheckpointError(f"{file}: cannot read the checkpoint's spec: {error.strerror}") from None
    try:
        return loads_spec(text, registry, file=str(file))
    except SpecError as error:
        raise CheckpointError(f"{file}: the checkpoint's spec does not load here:\n{error}") from None


def read_tokenizer(directory: Path) -> CharTokenizer:
    try:
        return CharTokenizer.from_dict(_read_json(directory / "tokenizer.json"))
    except TokenizerError as error:
        raise CheckpointError(f"{directory / 'tokenizer.json'}: {error}") from None


def _read_json(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{file}: cannot read checkpoint JSON: {error}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{file}: expected a JSON object, found {type(data).__name__}")
    return data


def _read_tensors(file: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(file)
    except (OSError, SafetensorError) as error:
        raise CheckpointError(f"{file}: cannot read safetensors: {error}") from None


def load_model(path: str | Path, registry: Registry | None = None, *, device: str | torch.device = "cpu"):
    """The trained model (in eval mode) and its tokenizer; the optimizer's files are not read."""
    from ..assemble import build
    from .state import load_model_state

    directory = resolve(path)
    spec = read_spec(directory, registry)
    model = build(spec, registry=registry, device=device)
    tensors = _read_tensors(directory / "model.safetensors")
    load_model_state(model, tensors, source=str(directory / "model.safetensors"))
    return model.eval(), read_tokenizer(directory)
