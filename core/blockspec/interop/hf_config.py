"""Hugging Face config.json <-> blockspec spec dict: the family-independent part.

Which family a config.json belongs to comes from ``architectures`` (or ``model_type``)
through ``interop.families.FAMILIES``; that family's module reads the keys, as real
checkpoints have them, written by old and new ``transformers`` alike. Anything the
blockspec model would compute differently is refused with the key that says so: a
silently different model is worse than no import.
"""

from __future__ import annotations

from typing import Any

from blockspec.errors import CheckpointError, Problem
from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import INERT, ConfigReader
from blockspec.interop.family import Family
from blockspec.interop.families import FAMILIES, family_of_architecture

KEPT_FROM_ORIGINAL = INERT - {"architectures", "model_type", "dtype", "torch_dtype", "transformers_version"}


def architecture(config: dict[str, Any], file: str) -> str:
    """The supported architecture a config describes, from ``architectures`` or ``model_type``."""
    listed = config.get("architectures")
    model_types = {t: arch for family in FAMILIES for t, arch in family.model_types.items()}
    model_type = config.get("model_type")
    by_type = model_types.get(model_type) if isinstance(model_type, str) else None
    names = listed if isinstance(listed, list) and listed else [by_type]
    supported = [arch for family in FAMILIES for arch in family.architectures]
    if len(names) != 1 or not isinstance(names[0], str) or names[0] not in supported:
        found = listed if listed else f"model_type {config.get('model_type')!r}"
        raise CheckpointError(Problem(file=file, path="$.architectures",
                                      message=f"unsupported architecture {found!r:.80}",
                                      hint=f"blockspec imports {', '.join(supported)}"))
    return names[0]


def family_of(config: dict[str, Any], file: str) -> Family:
    """The family that reads this config.json; CheckpointError naming the supported architectures."""
    family = family_of_architecture(architecture(config, file))
    assert family is not None  # architecture() accepts only what some family lists
    return family


def spec_dict(config: dict[str, Any], *, file: str, name: str) -> dict[str, Any]:
    """config.json (as a dict) -> a blockspec spec dict, or CheckpointError listing every problem."""
    family = family_of(config, file)
    reader = ConfigReader(config, file)
    document = family.spec_dict(reader, name)
    reader.refuse_unread(family.title)
    reader.raise_problems()
    return document


def hf_config(spec: ModelSpec, family: Family, *, dtype: str, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config.json of an exported model; keys of ``base`` (the imported original) are kept
    when they do not describe the architecture (token ids, generation settings): only INERT ones."""
    ours = family.config_json(spec)
    kept = {k: v for k, v in (base or {}).items() if k in KEPT_FROM_ORIGINAL} if _family_of(base) is family else {}
    ids = _token_ids(kept, spec.model.vocab_size)
    return {**kept, **ours, **ids, "dtype": dtype, "torch_dtype": dtype}


TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def _token_ids(kept: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    """The special token ids, always written: the imported original's where they lie inside the vocabulary,
    else null. Left out, transformers fills in the family's default (GPT-2's 50256), which a 65-character
    vocabulary does not have; a blockspec-trained model has no special tokens, and null says so."""

    def inside(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < vocab_size

    found = {}
    for key in TOKEN_IDS:
        value = kept.get(key)
        if isinstance(value, list):  # several end ids (Llama 3): keep those the vocabulary has
            value = [v for v in value if inside(v)] or None
        found[key] = value if inside(value) or isinstance(value, list) else None
    return found


def _family_of(base: dict[str, Any] | None) -> Family | None:
    names = (base or {}).get("architectures") or [None]
    return family_of_architecture(names[0]) if isinstance(names, list) and isinstance(names[0], str) else None
