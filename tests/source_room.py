"""The room for model sources: every kind of source a command takes, made once per session.

A spec file, checkpoints with no, a character and a BPE tokenizer, a training checkpoint, a Hugging Face
directory and its import. conftest's ``room`` builds it once; test_source_room and test_api_export read it
(test_api_export adds its exports beside the rest, under new names).
"""

from __future__ import annotations

from pathlib import Path

import blockspec
from blockspec.cli import main
from blockspec.interop import export_hf

from .corpus import small_play
from .specs import spec_text

VOCAB = 300
FAST = ["--batch-size", "4", "--eval-batches", "1", "--eval-every", "0", "--lr", "1e-2", "--quiet"]


def micro(name: str, vocab_size: int) -> str:
    return spec_text(name=name, vocab_size=vocab_size, context_length=16, d_model=16, n_layers=1, n_heads=2,
                     d_ff=32)


def cli(*argv) -> None:
    assert main([str(a) for a in argv]) == 0


def write_room(root: Path, registry: blockspec.Registry) -> Path:
    """Every kind of model source, by name, and the BPE they share."""
    (root / "play.txt").write_text(small_play(200))
    (root / "bpe.toml").write_text(micro("bpe-micro", VOCAB))
    (root / "char.toml").write_text(micro("char-micro", 65))
    cli("tokenizer", "train", root / "play.txt", "--vocab-size", VOCAB, "--out", root / "tok")
    cli("data", "prepare", root / "play.txt", "--tokenizer", root / "tok", "--out", root / "data", "--quiet")
    cli("train", root / "bpe.toml", "--data", root / "data", *FAST, "--steps", 1, "--out", root / "training")
    cli("train", root / "char.toml", "--data", root / "play.txt", *FAST, "--steps", 1, "--out", root / "char")
    model = blockspec.build(blockspec.load_spec(root / "bpe.toml", registry), registry=registry, seed=3)
    blockspec.save(model, root / "bare")
    export_hf(model, root / "hf", extra_files={"tokenizer.json": (root / "tok" / "tokenizer.json").read_bytes()})
    cli("import-hf", root / "hf", "--out", root / "imported")
    return root
