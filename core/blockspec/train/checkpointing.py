"""Training checkpoints: a ``blockspec.save`` checkpoint plus the optimizer, tokenizer and history.

The model's spec and weights go through ``blockspec.save`` / ``blockspec.load`` (atomic
directory write, sha256 manifest, safetensors only), so a training checkpoint is also an
ordinary blockspec checkpoint (``trace``, ``export`` and ``blockspec.load`` read it). Three
extra files travel in the same atomic write and are verified against the same manifest:

- ``tokenizer.json``: the characters, or the Hugging Face tokenizer.json (BPE) the run trained with;
- ``optimizer.safetensors``: AdamW's moments and step per parameter *name*, and the CPU RNG;
- ``training.json``: step, settings, loss history and AdamW's param groups.

A model imported from (or fine-tuned from) a Hugging Face directory also keeps that directory's
``hf/`` files (config.json, tokenizer files): ``export-hf`` writes them back beside the new weights.

An adapter run (``base`` set) writes an adapter checkpoint: the same files, but ``adapter.safetensors``
and ``base.json`` in place of the model's weights and hf/ files (``checkpoint.directory``).

No pickle anywhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import torch
import attrs
from attrs import field, frozen
from safetensors import SafetensorError
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from blockspec.assembly.assemble import build_unfilled
from blockspec.checkpoint.base_ref import BaseReference
from blockspec.checkpoint.directory import load, pinned_checkpoint, read_checkpoint_manifest, read_extra_file, save
from blockspec.checkpoint.layout import OPTIMIZER_FILE, TOKENIZER_FILE, TRAINING_FILE, carried_entries
from blockspec.errors import CheckpointError, Problem
from blockspec.modules.transformer import Transformer
from blockspec.registry.components import Registry
from blockspec.spec.documents import structure_document
from blockspec.spec.schema import ModelSpec
from blockspec.spec.strict import CONVERTER
from blockspec.spec.validators import Check
from blockspec.data.tokenizer import CharTokenizer, HFTokenizer, Tokenizer, tokenizer_bytes
from blockspec.sources import is_checkpoint
from blockspec.sources.tokenizers import tokenizer_of
from blockspec.checkpoint.weights import tied_aliases
from blockspec.train.state import check_optimizer_state, check_rng_state, load_model_state

FORMAT = "blockspec-train-checkpoint"
VERSION = 1


# Module-level aliases: a lambda inside a class's (string) annotation cannot see this module's names.
FormatName = Annotated[str, Check(lambda text: text == FORMAT, repr(FORMAT))]
FormatVersion = Annotated[int, Check(lambda version: version == VERSION, f"{VERSION} (this blockspec reads version {VERSION})")]
StepCount = Annotated[int, Check(lambda step: step >= 0, "a step count")]
Seconds = Annotated[float, Check(lambda seconds: seconds >= 0, "a duration in seconds")]
Loss = Annotated[Any, Check(lambda v: type(v) in (int, float), "a number")]  # nan and inf included: a run may diverge
MaybeLoss = Annotated[Any, Check(lambda v: v is None or type(v) in (int, float), "a number or null")]
ParamGroup = Annotated[dict[str, Any], Check(
    lambda group: isinstance(group.get("params"), list) and all(isinstance(n, str) for n in group["params"]),
    "an optimizer parameter group with a list of parameter names")]


@frozen(kw_only=True)
class EvaluationRecord:
    step: int
    train_loss: Loss
    val_loss: Loss
    val_bpb: MaybeLoss = None  # checkpoints written before bits per byte was measured have none


@frozen(kw_only=True)
class HistoryRecord:
    train: list[Loss]
    evals: list[EvaluationRecord]


@frozen(kw_only=True)
class TrainingDocument:
    """training.json: checked here; ``config`` is checked as a TrainConfig when a run resumes."""

    format: FormatName
    version: FormatVersion
    step: StepCount
    config: dict[str, Any]
    history: HistoryRecord
    train_seconds: Seconds = 0.0
    param_groups: list[ParamGroup] = field(factory=list)


@frozen(kw_only=True)
class Checkpoint:
    """Everything a training checkpoint holds, as plain tensors and data (no modules)."""

    spec: ModelSpec
    tokenizer: CharTokenizer | HFTokenizer
    model_state: dict[str, torch.Tensor]  # unique tensors: no tied aliases
    optimizer_state: dict[str, Any]  # {"state": {name: {key: tensor}}, "param_groups": [{..., "params": [name]}]}
    rng_state: torch.Tensor | None
    training: dict[str, Any]  # step, settings, history
    carried: dict[str, bytes] = field(factory=dict)  # "hf/..." files of the Hugging Face model it came from
    base: BaseReference | None = None  # adapter fine-tuning: the base checkpoint; only the adapters are saved

    @property
    def step(self) -> int:
        return int(self.training["step"])


# ---------------------------------------------------------------- writing


def save_checkpoint(path: str | Path, checkpoint: Checkpoint, registry: Registry | None = None, *,
                    overwrite: bool = False) -> Path:
    """Write ``checkpoint`` to the directory ``path`` atomically (through ``blockspec.save``).

    An existing checkpoint there is replaced only with ``overwrite`` (as for ``blockspec.save``).
    """
    tensors, groups = flatten_optimizer_state(checkpoint.optimizer_state)
    if checkpoint.rng_state is not None:
        tensors["rng/cpu"] = checkpoint.rng_state
    training = {"format": FORMAT, "version": VERSION, **checkpoint.training, "param_groups": groups}
    files = {
        TOKENIZER_FILE: tokenizer_bytes(checkpoint.tokenizer),
        OPTIMIZER_FILE: save_tensors(_contiguous(tensors), metadata={"format": "pt"}),
        TRAINING_FILE: json.dumps(training, indent=1).encode("utf-8"),
        **checkpoint.carried,
    }
    model = _holding(checkpoint, registry)
    return save(model, path, extra={"format": FORMAT, "step": checkpoint.step}, extra_files=files,
                overwrite=overwrite)


def _holding(checkpoint: Checkpoint, registry: Registry | None) -> Transformer:
    """A CPU model holding the checkpoint's weights (FSDP's live model is sharded: save needs a whole one)."""
    model = build_unfilled(checkpoint.spec, registry=registry)
    load_model_state(model, checkpoint.model_state, source="checkpoint")
    model.base = checkpoint.base  # an adapter run: ``save`` writes its adapters and a reference to this base
    return model


def _contiguous(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().cpu().contiguous() for name, tensor in tensors.items()}


# ---------------------------------------------------------------- the optimizer's state as tensors + JSON


def flatten_optimizer_state(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """Name-keyed optimizer state -> tensors "state/<param>/<key>" and JSON-able param groups."""
    tensors = {}
    for name, entries in state["state"].items():
        for key, value in entries.items():
            tensors[f"state/{name}/{key}"] = value if isinstance(value, torch.Tensor) else torch.tensor(value)
    return tensors, [dict(group) for group in state["param_groups"]]


def unflatten_optimizer_state(tensors: dict[str, torch.Tensor], groups: list[dict[str, Any]]) -> dict[str, Any]:
    state: dict[str, dict[str, torch.Tensor]] = {}
    for flat, tensor in tensors.items():
        if flat.startswith("state/"):
            name, key = flat[len("state/") :].rsplit("/", 1)
            state.setdefault(name, {})[key] = tensor
    groups = [{**group, "betas": tuple(group["betas"])} if "betas" in group else group for group in groups]
    return {"state": state, "param_groups": groups}


# ---------------------------------------------------------------- reading


def load_checkpoint(path: str | Path, registry: Registry | None = None) -> Checkpoint:
    """Verify and read every part of a training checkpoint; anything missing or corrupt is a CheckpointError.

    Every part comes from one save (the directory is pinned), however often another process replaces it."""
    with pinned_checkpoint(path):
        model = load(path, registry=registry)
        document = structure_document(_json(path, TRAINING_FILE), TrainingDocument,
                                      file=f"{path}/{TRAINING_FILE}", error=CheckpointError)
        training = CONVERTER.unstructure(document)
        optimizer = _tensors(path, OPTIMIZER_FILE)
        tokenizer = _own_tokenizer(path)
    optimizer_state = unflatten_optimizer_state(optimizer, training.pop("param_groups", []))
    check_optimizer_state(model, optimizer_state, source=f"{path}/{OPTIMIZER_FILE}")
    aliases = tied_aliases(model)
    return Checkpoint(
        spec=model.spec,
        tokenizer=tokenizer,
        model_state={k: v.detach() for k, v in model.state_dict().items() if k not in aliases},
        optimizer_state=optimizer_state,
        rng_state=check_rng_state(optimizer.get("rng/cpu"), source=f"{path}/{OPTIMIZER_FILE}"),
        training=training,
        carried=carried_entries(model.carried),
        base=getattr(model, "base", None),
    )


def saved_step(directory: str | Path) -> int | None:
    """The step of the training checkpoint in ``directory`` (its manifest read first); None when there is none."""
    if not is_checkpoint(directory):
        return None
    read_checkpoint_manifest(directory)
    return int(json.loads(read_extra_file(directory, TRAINING_FILE))["step"])


def load_model(path: str | Path, registry: Registry | None = None, *,
               device: str | torch.device = "cpu") -> tuple[Transformer, Tokenizer | None]:
    """The model (training mode, as `load` returns it) and the tokenizer it carries, if any: a trained
    checkpoint's characters, or an imported one's Hugging Face tokenizer.json; the optimizer's files are not read."""
    return load(path, registry=registry, device=device), tokenizer_of(path)


def _own_tokenizer(path: str | Path) -> CharTokenizer | HFTokenizer:
    """A training checkpoint's tokenizer (the rule's first answer: what the run trained with)."""
    tokenizer = tokenizer_of(path)
    if tokenizer is None:
        _extra(path, TOKENIZER_FILE)  # says which file is missing, and what writes one
    return tokenizer


def _extra(path: str | Path, name: str) -> bytes:
    try:
        return read_extra_file(path, name)
    except CheckpointError as error:
        raise CheckpointError(_not_training(error.problems, path)) from None


def _not_training(problems: tuple[Problem, ...], path: str | Path) -> list[Problem]:
    """The problems of a missing training file, the last one saying what writes such files."""
    *rest, last = problems
    hint = f"{path} is not a training checkpoint ({{save_checkpoint}} writes those)"
    return [*rest, attrs.evolve(last, hint=f"{last.hint}; {hint}" if last.hint else hint,
                                names={**last.names, "save_checkpoint": "save_checkpoint"})]


def _json(path: str | Path, name: str) -> dict[str, Any]:
    try:
        data = json.loads(_extra(path, name))
    except ValueError as error:
        raise CheckpointError(f"{path}: {name}: not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: {name}: expected a JSON object, found {type(data).__name__}")
    return data


def _tensors(path: str | Path, name: str) -> dict[str, torch.Tensor]:
    try:
        return load_tensors(_extra(path, name))
    except SafetensorError as error:
        raise CheckpointError(f"{path}: {name}: cannot read safetensors: {error}") from None
