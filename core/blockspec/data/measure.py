"""Bits per byte and per character: a model's loss in units no tokenizer decides.

A loss in nats per token compares only models that share a tokenizer: one token is one character
in a character model and about three in a 4,096-token BPE. Summed over a text and divided by the
text's UTF-8 bytes (or characters) instead, it is the code length of that text, which any two
models of it share. Torch-free; every figure of the kind (``eval``, training's validation, sweeps)
is computed here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from attrs import frozen

from blockspec.data.tokenizer import Tokenizer

LN2 = math.log(2.0)

__all__ = ["TextSize", "bits_per_byte", "bits_per_character", "decoded_size", "text_size"]


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


def bits_per_byte(total_nats: float, size: TextSize) -> float:
    """Σ −ln p(token) over a text, as bits per UTF-8 byte of that text."""
    return total_nats / LN2 / size.bytes


def bits_per_character(total_nats: float, size: TextSize) -> float:
    """Σ −ln p(token) over a text, as bits per character of that text."""
    return total_nats / LN2 / size.characters
