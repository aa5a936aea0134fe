"""A text file's token ids, piece by piece, the same ids as the whole file tokenised at once.

The data room's ``chunks`` reads about 1 MiB at a time, cut at a line break. A BPE's pre-tokenizer may
join whitespace around a line break ("\\n\\n", " \\n"), so a piece is cut only after a line break between
two characters that are not whitespace (``SAFE_CUT``), where the byte-level pre-tokenizers of GPT-2,
Llama 3, Qwen and the like split anyway: their ids then equal the whole file's. What is bounded: one piece
(up to ``MAX_CARRY`` bytes of text past a chunk while no such break comes). The one caveat: a text
without such a line break for that long is cut at the data room's line break, where a tokenizer that
joins across it could give other ids for the few tokens there; so could one that adds a prefix space or
a begin token to every text it encodes (their first tokens would differ in any case).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from blockspec.data.measure import TextSize, text_size
from blockspec.data.textfiles import CHUNK_BYTES, chunks
from blockspec.data.tokenizer import Tokenizer, TokenizerError

SAFE_CUT = re.compile(r"(?<=\S)\n(?=\S)")
MAX_CARRY = 4 * CHUNK_BYTES

__all__ = ["TextTokens", "text_pieces"]


def text_pieces(path: str | Path, size: int = CHUNK_BYTES) -> Iterator[str]:
    """The text of ``path`` in pieces that end just after a line break between two non-space characters."""
    carry = ""
    for chunk in chunks(path, size):
        text = carry + chunk
        cut = _last_safe_cut(text)
        if not cut and len(text) > MAX_CARRY:
            cut = len(text)  # no safe break for long: the data room's cut (the caveat above)
        if cut:
            yield text[:cut]
        carry = text[cut:]
    if carry:
        yield carry


def _last_safe_cut(text: str) -> int:
    """Just after the last safe line break, or 0; the text's end cannot be one (what follows is unread)."""
    found = None
    for found in SAFE_CUT.finditer(text):
        pass
    return 0 if found is None else found.end()


class TextTokens:
    """A file's ids piece by piece (``__iter__``), counting the bytes and characters read (``size``)."""

    def __init__(self, path: str | Path, tokenizer: Tokenizer, piece_bytes: int = CHUNK_BYTES) -> None:
        self.path, self.tokenizer, self.piece_bytes = path, tokenizer, piece_bytes
        self.size = TextSize(bytes=0, characters=0)

    def __iter__(self) -> Iterator[list[int]]:
        for piece in text_pieces(self.path, self.piece_bytes):
            yield self._encoded(piece)
            grown = text_size(piece)
            self.size = TextSize(bytes=self.size.bytes + grown.bytes,
                                 characters=self.size.characters + grown.characters)

    def _encoded(self, piece: str) -> list[int]:
        try:
            return self.tokenizer.encode(piece)
        except TokenizerError as error:  # its position counts from the piece's first character
            raise TokenizerError(f"{self.path}: {error} (counting from character {self.size.characters:,} of the "
                                 f"file)") from None
