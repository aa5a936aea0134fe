"""The file names of a Hugging Face model directory, defined once, and the small files a model keeps from it.

Torch-free, so telling a Hugging Face directory from a checkpoint costs the command line nothing.
"""

from __future__ import annotations

from pathlib import Path

from blockspec.outputs.kinds import directory_kind

CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
TOKENIZER = "tokenizer.json"  # the tokenizers library's file: what blockspec reads as the model's tokenizer
CARRIED = (  # small files a model read from here keeps (``model.carried``), so save and export write them back
    CONFIG, "generation_config.json", TOKENIZER, "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "tokenizer.model", "vocab.json", "merges.txt",
)
CARRIED_LIMIT = 64 * 1024 * 1024
# what ``export-hf --force`` may replace: a directory holding what an export writes and nothing else
EXPORT = directory_kind("a Hugging Face export", markers=(CONFIG, SAFETENSORS), entries=(SAFETENSORS, *CARRIED))


def is_hf_directory(path: str | Path) -> bool:
    """Whether ``path`` is laid out as a Hugging Face model (it has a config.json); says nothing of its health."""
    return (Path(path) / CONFIG).is_file()


def carried_files(directory: Path) -> dict[str, bytes]:
    """The tokenizer, generation and config files present, by name (bounded in size)."""
    found = {}
    for name in CARRIED:
        path = Path(directory) / name
        if path.is_file() and path.stat().st_size <= CARRIED_LIMIT:
            found[name] = path.read_bytes()
    return found
