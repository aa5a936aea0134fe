"""blockspec Transformer -> a Hugging Face directory that ``from_pretrained`` loads as the same model."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from blockspec.checkpoint.atomic import atomic_directory
from blockspec.outputs.targets import check_writable_target
from blockspec.errors import CheckpointError
from blockspec.checkpoint.manifest import check_file_name
from blockspec.modules.transformer import Transformer
from blockspec.spec.schema import ModelSpec
from blockspec.checkpoint.safetensors_file import write_file
from blockspec.checkpoint.weights import unique_state
from blockspec.interop import hf_config
from blockspec.interop.families import family_for
from blockspec.interop.family import Family
from blockspec.interop.hf_layout import CONFIG, EXPORT, SAFETENSORS
from blockspec.interop.rope_layout import interleaved_state_as_half
from blockspec.interop.weight_map import to_hf


def export_hf(
    model: Transformer,
    directory: str | Path,
    *,
    base_config: Mapping[str, Any] | None = None,
    extra_files: Mapping[str, bytes] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write config.json + model.safetensors (and ``extra_files``, e.g. the tokenizer) atomically.

    ``base_config`` is the original config.json of an imported model: its keys that do not
    describe the architecture (token ids, generation settings) are kept. Both default to what
    the model carries (``model.carried``: its config.json, and the rest as extra files), so a
    model loaded from a checkpoint or a Hugging Face directory exports with its tokenizer.
    An interleaved-RoPE model is exported with its q/k rows permuted to Hugging Face's half layout.

    An existing export at ``directory`` is refused (``OutputExistsError``) unless ``overwrite``, and
    a directory that is not one (``hf_layout.EXPORT``) always is; creating is exclusive and
    replacing atomic, as for checkpoints (atomic.py).
    """
    spec = model.spec
    carried = dict(getattr(model, "carried", {}))
    base_config = base_config if base_config is not None else _carried_config(carried.pop(CONFIG, None))
    extra_files = extra_files if extra_files is not None else carried
    family = family_for(spec, prefer=_architecture(base_config))
    target = Path(directory)
    check_writable_target(target, kind=EXPORT, overwrite=overwrite)
    state = hf_rows(model, unique_state(model))
    tensors = to_hf(family.rules(spec), state)
    dtype = str(next(iter(state.values())).dtype).removeprefix("torch.")
    config = hf_config.hf_config(spec, family, dtype=dtype, base=dict(base_config or {}))
    with atomic_directory(target, overwrite=overwrite) as staging:
        for name, data in _side_files(extra_files).items():
            (staging / name).write_bytes(data)
        (staging / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        write_file(tensors, staging / SAFETENSORS, metadata={"format": "pt"})
    return target


def hf_rows(model: Transformer, state: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
    """``state`` (blockspec's names) with the rows of an interleaved-RoPE model's q and k in Hugging Face's half
    layout; any other model's as it is. The rows of a LoRA's B on qkv move the same way (``peft_export``)."""
    spec = model.spec
    if spec.positional.name == "rope" and getattr(spec.positional.config, "layout", "half") == "interleaved":
        return interleaved_state_as_half(state, spec.model, rotary_dim=getattr(model.positional, "rotary_dim", None))
    return state


def export_family(model: Transformer, spec: ModelSpec) -> Family:
    """The family ``export_hf`` writes ``spec`` as for ``model``: the one its carried config.json names, if it fits."""
    return family_for(spec, prefer=_architecture(_carried_config(getattr(model, "carried", {}).get(CONFIG))))


def _carried_config(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        config = json.loads(data)
    except ValueError as error:
        raise CheckpointError(f"the model's carried {CONFIG}: not valid JSON: {error}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"the model's carried {CONFIG}: expected a JSON object, found {type(config).__name__}")
    return config


def _architecture(config: Mapping[str, Any] | None) -> str | None:
    """The original's first listed architecture: an imported Mistral exports as Mistral, not as Llama."""
    names = (config or {}).get("architectures")
    return names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None


def _side_files(extra_files: Mapping[str, bytes] | None) -> dict[str, bytes]:
    files = {}
    for name, data in (extra_files or {}).items():
        if name in (CONFIG, SAFETENSORS) or "/" in name:
            continue
        try:
            files[check_file_name(name)] = bytes(data)
        except ValueError as error:
            raise CheckpointError(f"extra_files: {error}") from None
    return files
