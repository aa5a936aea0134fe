"""A character corpus split 90/10, and batches that depend only on (seed, stream, index).

A batch is a pure function of the seed and the step, so a resumed run, or the same
run spread over several processes, sees exactly the batches of the uninterrupted
single-process run.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from collections.abc import Mapping, Sized
from typing import Protocol

import torch

from blockspec.errors import BlockspecError
from blockspec.data.tokenizer import CharTokenizer, HFTokenizer, TokenizerError

TRAIN_FRACTION = 0.9


class DataError(BlockspecError, ValueError):
    """The training text cannot be read, is too short, or does not fit the model."""


def batch_seed(seed: int, stream: str, index: int) -> int:
    """A stable 63-bit seed for batch ``index`` of ``stream`` ("train", "eval-val", ...)."""
    digest = hashlib.blake2b(f"{seed}:{stream}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class Dataset(Protocol):
    """What the trainer draws batches from: a text's characters (CharDataset) or a prepared directory."""

    tokenizer: CharTokenizer | HFTokenizer

    def check_fits(self, vocab_size: int, context_length: int) -> None: ...

    def batch(self, split: str, *, size: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]: ...


class CharDataset:
    """Token ids of a text, the first 90% for training and the rest for validation."""

    def __init__(self, ids: torch.Tensor, tokenizer: CharTokenizer | HFTokenizer, *, source: str = "<text>") -> None:
        self.tokenizer, self.source = tokenizer, source
        cut = int(len(ids) * TRAIN_FRACTION)
        self.splits = {"train": ids[:cut], "val": ids[cut:]}

    @classmethod
    def from_text(cls, text: str, tokenizer: CharTokenizer | HFTokenizer | None = None, *,
                  source: str = "<text>") -> CharDataset:
        """Encode ``text`` (characters, or a model's subwords); without a tokenizer, one is made from its characters."""
        tokenizer = tokenizer or CharTokenizer.from_text(text)
        try:
            ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
        except TokenizerError as error:
            raise DataError(f"{source}: {error}") from None
        return cls(ids, tokenizer, source=source)

    @classmethod
    def from_file(cls, path: str | Path, tokenizer: CharTokenizer | HFTokenizer | None = None) -> CharDataset:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise DataError(f"{path}: cannot read the training text: {error}") from None
        return cls.from_text(text, tokenizer, source=str(path))

    def check_fits(self, vocab_size: int, context_length: int) -> None:
        """Refuse a text the model cannot represent, or a split too short for one window."""
        if self.tokenizer.vocab_size > vocab_size:
            what = "distinct characters" if isinstance(self.tokenizer, CharTokenizer) else "tokens in its tokenizer"
            raise DataError(f"{self.source}: has {self.tokenizer.vocab_size} {what}, but the spec's "
                            f"$.model.vocab_size is {vocab_size}; raise vocab_size to at least "
                            f"{self.tokenizer.vocab_size}")
        check_windows(self.source, self.splits, context_length, unit="characters", remedy="use a longer text")

    def batch(self, split: str, *, size: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``size`` random windows: inputs x and next-character targets y, (size, length) each."""
        ids = self.splits[split]
        offsets = window_offsets(len(ids), size=size, length=length, seed=seed)  # (B,)
        windows = ids[offsets[:, None] + torch.arange(length + 1)]  # (B, T + 1)
        return windows[:, :-1], windows[:, 1:]


def check_windows(source: str, splits: Mapping[str, Sized], context_length: int, *, unit: str, remedy: str) -> None:
    """Refuse a split too short for one window: a window is context_length inputs and one more target."""
    for name, ids in splits.items():
        if len(ids) <= context_length:
            raise DataError(f"{source}: the {name} split has {len(ids)} {unit}, but one window of "
                            f"$.model.context_length = {context_length} needs {context_length + 1}; {remedy}")


def window_offsets(n_ids: int, *, size: int, length: int, seed: int) -> torch.Tensor:
    """Where ``size`` windows of ``length + 1`` ids start in a split of ``n_ids``: the same for the same seed."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, n_ids - length, (size,), generator=generator)  # (B,)
