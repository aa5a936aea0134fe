"""Bits per byte and per character: a model's loss in units no tokenizer decides.

A loss in nats per token compares only models that share a tokenizer: one token is one character
in a character model and about three in a 4,096-token BPE. Summed over a text and divided by the
text's UTF-8 bytes (or characters) instead, it is the code length of that text, which any two
models of it share. Torch-free; every figure of the kind (``eval``, training's validation, sweeps)
is computed here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from attrs import frozen

from blockspec.data.tokenizer import Tokenizer

LN2 = math.log(2.0)

__all__ = ["TextSize", "bits_per_byte", "bits_per_character", "decoded_size", "mean_bits_per_byte",
           "streamed_size", "text_size"]
REPLACEMENT = "\ufffd"  # what a byte-level decoder writes for a character cut in two
HELD_BACK = 3  # a UTF-8 character is at most 4 bytes, so at most 3 tokens of it end a block


@frozen
class TextSize:
    """How long a text is in the units bits-per-X divide by."""

    bytes: int  # UTF-8
    characters: int  # Unicode code points


def text_size(text: str) -> TextSize:
    return TextSize(bytes=len(text.encode("utf-8")), characters=len(text))


def decoded_size(tokenizer: Tokenizer, ids: Iterable[int]) -> TextSize:
    """The size of the text ``ids`` stand for: decoded as a whole, so a character split over two
    byte-level tokens counts once."""
    return text_size(tokenizer.decode(list(ids)))


def streamed_size(tokenizer: Tokenizer, blocks: Iterable[Sequence[int]]) -> TextSize:
    """``decoded_size`` of the ids of ``blocks`` joined, one block at a time (constant memory): the last tokens
    of a block whose decoding ends in a cut character wait for the next block, so that character counts once."""
    total, held = TextSize(bytes=0, characters=0), []
    for block in blocks:
        ids = held + list(block)
        whole, text = _whole_prefix(tokenizer, ids)
        total, held = _plus(total, text_size(text)), ids[whole:]
    return _plus(total, decoded_size(tokenizer, held)) if held else total


def _whole_prefix(tokenizer: Tokenizer, ids: list[int]) -> tuple[int, str]:
    """How many of ``ids`` decode without a cut character at their end (all of them if none does), and their text."""
    for cut in range(len(ids), max(len(ids) - HELD_BACK, 0) - 1, -1):
        text = tokenizer.decode(ids[:cut])
        if not text.endswith(REPLACEMENT):
            return cut, text
    return len(ids), tokenizer.decode(ids)


def _plus(a: TextSize, b: TextSize) -> TextSize:
    return TextSize(bytes=a.bytes + b.bytes, characters=a.characters + b.characters)


def mean_bits_per_byte(mean_nats: float, tokens: int, size: TextSize) -> float | None:
    """A mean loss per token, estimated on a sample of a text's ``tokens`` tokens, as bits per byte of that
    text: the mean times the text's tokens is its estimated Σ −ln p. None for a text of no bytes."""
    return bits_per_byte(mean_nats * tokens, size) if size.bytes else None


def bits_per_byte(total_nats: float, size: TextSize) -> float:
    """Σ −ln p(token) over a text, as bits per UTF-8 byte of that text."""
    return total_nats / LN2 / size.bytes


def bits_per_character(total_nats: float, size: TextSize) -> float:
    """Σ −ln p(token) over a text, as bits per character of that text."""
    return total_nats / LN2 / size.characters
