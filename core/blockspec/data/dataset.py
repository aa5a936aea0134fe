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
from blockspec.data.measure import TextSize, decoded_size
from blockspec.data.textfiles import TextFileError, chunks
from blockspec.data.tokenizer import CharTokenizer, HFTokenizer, TokenizerError

TRAIN_FRACTION = 0.9
IGNORED_TARGET = -100  # a target the loss skips (F.cross_entropy's ignore_index): a prompt's, in instruction data


class DataError(BlockspecError, ValueError):
    """The training text cannot be read, is too short, or does not fit the model."""


def batch_seed(seed: int, stream: str, index: int) -> int:
    """A stable 63-bit seed for batch ``index`` of ``stream`` ("train", "eval-val", ...)."""
    digest = hashlib.blake2b(f"{seed}:{stream}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class Dataset(Protocol):
    """What the trainer draws batches from: a text's characters (CharDataset) or a prepared directory."""

    tokenizer: CharTokenizer | HFTokenizer
    masked: bool  # whether some targets are IGNORED_TARGET (instruction data's prompts): the loss skips them

    def check_fits(self, vocab_size: int, context_length: int) -> None: ...

    def batch(self, split: str, *, size: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]: ...

    def split_size(self, split: str) -> tuple[int, TextSize]:
        """A split's tokens and the size of the text they decode to (what bits per byte divides by)."""
        ...


class CharDataset:
    """Token ids of a text, the first 90% for training and the rest for validation."""

    masked = False  # every target is scored

    def __init__(self, ids: torch.Tensor, tokenizer: CharTokenizer | HFTokenizer, *, source: str = "<text>") -> None:
        self.tokenizer, self.source = tokenizer, source
        cut = int(len(ids) * TRAIN_FRACTION)
        self.splits = {"train": ids[:cut], "val": ids[cut:]}
        self._sizes: dict[str, TextSize] = {}

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
            text = "".join(chunks(path))  # the data room's reading: a missing, empty or non-UTF-8 file in one line
        except TextFileError as error:
            raise DataError(error.problems) from None
        return cls.from_text(text, tokenizer, source=str(path))

    def check_fits(self, vocab_size: int, context_length: int) -> None:
        """Refuse a text the model cannot represent, or a split too short for one window."""
        if self.tokenizer.vocab_size > vocab_size:
            what = "distinct characters" if isinstance(self.tokenizer, CharTokenizer) else "tokens in its tokenizer"
            raise DataError(f"{self.source}: has {self.tokenizer.vocab_size} {what}, but the spec's "
                            f"$.model.vocab_size is {vocab_size}; raise vocab_size to at least "
                            f"{self.tokenizer.vocab_size}")
        unit = "characters" if isinstance(self.tokenizer, CharTokenizer) else "tokens"  # a checkpoint's subwords
        check_windows(self.source, self.splits, context_length, unit=unit, remedy="use a longer text")

    def split_size(self, split: str) -> tuple[int, TextSize]:
        """The split's ids and the size of its text (its characters' UTF-8 bytes), decoded once."""
        if split not in self._sizes:
            self._sizes[split] = decoded_size(self.tokenizer, self.splits[split].tolist())
        return len(self.splits[split]), self._sizes[split]

    def batch(self, split: str, *, size: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``size`` random windows: inputs x and next-character targets y, (size, length) each."""
        ids = self.splits[split]
        offsets = window_offsets(len(ids), size=size, length=length, seed=seed)  # (B,)
        windows = ids[offsets[:, None] + torch.arange(length + 1)]  # (B, T + 1)
        return windows[:, :-1], windows[:, 1:]


def check_windows(source: str, splits: Mapping[str, Sized], context_length: int, *, unit: str, remedy: str) -> None:
    """Refuse a text too short for one window (context_length inputs and one more target) in each split,
    saying how long it is and how long it must be."""
    if all(len(ids) > context_length for ids in splits.values()):
        return
    total, window = sum(len(ids) for ids in splits.values()), context_length + 1
    raise DataError(f"{source}: holds {total} {unit}; one window of $.model.context_length = {context_length} needs "
                    f"{window} in each split, the last {1 - TRAIN_FRACTION:.0%} (validation) included, so at least "
                    f"{shortest_text(window)} {unit} in all; {remedy}")


def shortest_text(window: int) -> int:
    """The fewest ids whose 90/10 split holds ``window`` ids on each side (the splits' own arithmetic)."""
    total = max(2 * window, int(window / (1 - TRAIN_FRACTION)) - 10)  # just below the answer
    while int(total * TRAIN_FRACTION) < window or total - int(total * TRAIN_FRACTION) < window:
        total += 1
    return total


def window_offsets(n_ids: int, *, size: int, length: int, seed: int) -> torch.Tensor:
    """Where ``size`` windows of ``length + 1`` ids start in a split of ``n_ids``: the same for the same seed."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, n_ids - length, (size,), generator=generator)  # (B,)
