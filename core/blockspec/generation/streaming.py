"""Text as it is generated, one row of a batch each, in whole UTF-8 characters only.

A byte-level BPE can end a step inside a character: its decode then ends in U+FFFD for the bytes
that have no character yet. Such a tail is held back until a later token completes it, so the
pieces joined are exactly the final text and no piece splits a character.
"""

from __future__ import annotations

from collections.abc import Callable

REPLACEMENT = "\ufffd"  # what tokenizers' decode gives for an incomplete UTF-8 tail


class TextStream:
    """Per row, the text not yet given out; ``push`` a step's tokens, get each row's new whole characters."""

    def __init__(self, batch: int, decode: Callable[[list[int]], str]) -> None:
        self.decode = decode
        self.ids: list[list[int]] = [[] for _ in range(batch)]
        self.given = [0] * batch  # characters of each row's decoded text already given out

    def push(self, tokens: list[int]) -> list[str]:
        """One new token per row -> each row's new text ("" while a character is incomplete)."""
        return [self._piece(row, token) for row, token in enumerate(tokens)]

    def _piece(self, row: int, token: int) -> str:
        self.ids[row].append(token)
        text = self.decode(self.ids[row]).rstrip(REPLACEMENT)  # an incomplete character waits for its bytes
        piece = text[self.given[row]:]
        self.given[row] = max(self.given[row], len(text))
        return piece

    def flush(self) -> list[str]:
        """At the end, whatever is left (an incomplete tail stays U+FFFD, as the final text has it)."""
        pieces = [self.decode(ids)[given:] for ids, given in zip(self.ids, self.given)]
        self.given = [len(self.decode(ids)) for ids in self.ids]
        return pieces
