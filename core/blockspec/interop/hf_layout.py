"""The file names of a Hugging Face model directory, defined once, and the small files a model keeps from it.

Every file of such a directory is read inside it (``checkpoint.contained``): a name that links out
of the directory, or is not a regular file, is refused, never followed. A Hugging Face cache
snapshot (``models--org--name/snapshots/<revision>/``) is the one layout whose files live elsewhere:
each is a link to ``../../blobs/<hash>``, and those links are followed into that ``blobs/`` only.

Torch-free, so telling a Hugging Face directory from a checkpoint costs the command line nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from blockspec.outputs.kinds import directory_kind
from blockspec.checkpoint.contained import CARRIED_LIMIT, contained_file, read_contained

CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
TOKENIZER = "tokenizer.json"  # the tokenizers library's file: what blockspec reads as the model's tokenizer
TOKENIZER_CONFIG = "tokenizer_config.json"  # transformers' settings for it (which class AutoTokenizer makes)
TOKENIZER_FILES = (  # the files that describe a tokenizer: one tokenizer's, never mixed with another's
    TOKENIZER, TOKENIZER_CONFIG, "special_tokens_map.json", "added_tokens.json", "tokenizer.model", "vocab.json",
    "merges.txt",
)
# small files a model read from here keeps (``model.carried``), so save and export write them back
CARRIED = (CONFIG, "generation_config.json", *TOKENIZER_FILES)
CACHE_SNAPSHOTS, CACHE_BLOBS = "snapshots", "blobs"  # huggingface_hub's cache: <repo>/snapshots/<rev>, <repo>/blobs
# what ``export-hf --force`` may replace: a directory holding what an export writes and nothing else
EXPORT = directory_kind("a Hugging Face export", markers=(CONFIG, SAFETENSORS), entries=(SAFETENSORS, *CARRIED))
# PEFT's adapter directory (``PeftModel.from_pretrained(base, DIR)``), which ``export-peft --force`` may replace
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_EXPORT = directory_kind("a PEFT adapter export", markers=(ADAPTER_CONFIG, ADAPTER_WEIGHTS),
                             entries=(ADAPTER_CONFIG, ADAPTER_WEIGHTS))


def is_hf_directory(path: str | Path) -> bool:
    """Whether ``path`` is laid out as a Hugging Face model (it has a config.json); says nothing of its health."""
    return (Path(path) / CONFIG).is_file()


def source_roots(directory: str | Path) -> tuple[Path, ...]:
    """Where the files of ``directory`` may lie: inside it, and, for a cache snapshot, in its repository's
    ``blobs/`` (itself no link, so a hostile snapshot cannot widen it)."""
    resolved = Path(os.path.realpath(directory))
    blobs = resolved.parent.parent / CACHE_BLOBS
    if resolved.parent.name == CACHE_SNAPSHOTS and blobs.is_dir() and not blobs.is_symlink():
        return resolved, blobs
    return (resolved,)


def hf_file(directory: str | Path, name: str) -> Path:
    """``directory/name`` once it is a regular file inside the directory (``source_roots``); else CheckpointError."""
    path = Path(directory) / name
    contained_file(path, source_roots(directory))
    return path


def read_hf_file(directory: str | Path, name: str, limit: int = CARRIED_LIMIT) -> bytes:
    """The bytes of one file of the directory, read inside it and bounded by ``limit``; else CheckpointError."""
    return read_contained(Path(directory) / name, source_roots(directory), limit)


def carried_files(directory: str | Path) -> dict[str, bytes]:
    """The tokenizer, generation and config files present, by name; one that is there but cannot be carried
    (a link out, not a regular file, too large) is refused, not left behind."""
    present = [name for name in CARRIED if os.path.lexists(Path(directory) / name)]
    return {name: read_hf_file(directory, name) for name in present}
