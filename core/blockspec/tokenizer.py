"""A character-level tokenizer: one id per distinct character, in sorted order.

The chapter's model reads Tiny Shakespeare one character at a time (65 distinct).
Torch-free, and saved with a checkpoint as plain JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .errors import BlockspecError

# The 65 characters of Tiny Shakespeare, sorted: newline, space, punctuation, the digit 3, letters.
SHAKESPEARE_CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
KIND = "char"


class TokenizerError(BlockspecError, ValueError):
    """Text holds a character the tokenizer does not know, or a saved tokenizer is malformed."""


class CharTokenizer:
    """Characters <-> ids; id i is the i-th character of ``chars``."""

    def __init__(self, chars: Iterable[str]) -> None:
        self.chars = "".join(chars)
        if len(set(self.chars)) != len(self.chars) or any(len(c) != 1 for c in self.chars):
            raise TokenizerError("a character tokenizer needs distinct single characters")
        self._ids = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """Every distinct character of ``text``, sorted, so the same text always gives the same ids."""
        return cls(sorted(set(text)))

    @classmethod
    def shakespeare(cls) -> CharTokenizer:
        """The Tiny Shakespeare vocabulary (65 characters) without reading the file."""
        return cls(SHAKESPEARE_CHARS)

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        try:
            return [self._ids[c] for c in text]
        except KeyError as error:
            raise TokenizerError(self._unknown(text, error.args[0])) from None

    def decode(self, ids: Iterable[int]) -> str:
        ids = list(ids)
        bad = [i for i in ids if not 0 <= i < len(self.chars)]
        if bad:
            raise TokenizerError(f"token id {bad[0]} is outside this tokenizer's 0..{len(self.chars) - 1}")
        return "".join(self.chars[i] for i in ids)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": KIND, "chars": self.chars}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CharTokenizer:
        if not isinstance(data, Mapping) or data.get("kind") != KIND or not isinstance(data.get("chars"), str):
            raise TokenizerError(f"expected a character tokenizer {{'kind': 'char', 'chars': '...'}}, found {data!r:.80}")
        return cls(data["chars"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharTokenizer) and other.chars == self.chars

    def __hash__(self) -> int:
        return hash(self.chars)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"

    def _unknown(self, text: str, char: str) -> str:
        where = text.index(char)
        return (f"character {char!r} (at offset {where}) is not in this tokenizer's vocabulary of "
                f"{self.vocab_size} characters; use only characters the model was trained on")
