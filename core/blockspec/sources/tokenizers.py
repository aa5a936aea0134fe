"""Which tokenizer goes with a model source: one rule, which every command and library call asks.

The rule, first match wins:

1. a checkpoint's own ``tokenizer.json`` (what a training run wrote: characters or a BPE);
2. the Hugging Face ``tokenizer.json`` it carries (``hf/tokenizer.json``: what an import kept);
3. a Hugging Face directory's ``tokenizer.json``;
4. none: a spec file, or a model saved without one.

Where a command must turn text into ids for a model with none (trace, explore), it says so and
uses ``stand_in_tokenizer``, which is no model's own. Torch-free.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from attrs import frozen

from blockspec.checkpoint.layout import CARRIED_PREFIX, TOKENIZER_FILE, is_checkpoint
from blockspec.checkpoint.manifest import read_manifest
from blockspec.data.tokenizer import (CHAR, CharTokenizer, HFTokenizer, Tokenizer, TokenizerError,
                                      read_tokenizer_directory, stand_in_tokenizer, tokenizer_from_bytes)
from blockspec.errors import CheckpointError
from blockspec.interop.hf_layout import TOKENIZER, is_hf_directory, read_hf_file
from blockspec.sources.kind import CHECKPOINT_KINDS, SourceKind, source_kind

CARRIED_TOKENIZER = CARRIED_PREFIX + TOKENIZER

__all__ = ["TokenizerFile", "stand_in_tokenizer", "text_tokenizer", "tokenizer_at", "tokenizer_file_of",
           "tokenizer_of"]


@frozen
class TokenizerFile:
    """The file the rule picks, unparsed: its bytes, where they came from, and whether they are a checkpoint's
    own (characters or a BPE) or a Hugging Face ``tokenizer.json``."""

    data: bytes
    source: str
    own: bool

    def tokenizer(self) -> CharTokenizer | HFTokenizer:
        """The tokenizer it holds; one that cannot be read is the source's fault: a CheckpointError."""
        if self.own:
            return _read(lambda: tokenizer_from_bytes(self.data, source=self.source))
        return _read(lambda: HFTokenizer(self.data, source=self.source))


def tokenizer_of(path: str | Path, kind: SourceKind | None = None) -> CharTokenizer | HFTokenizer | None:
    """The tokenizer that goes with the model source at ``path`` (the rule above), or None."""
    found = tokenizer_file_of(path, kind)
    return None if found is None else found.tokenizer()


def tokenizer_file_of(path: str | Path, kind: SourceKind | None = None) -> TokenizerFile | None:
    """The file of the tokenizer that goes with the source at ``path`` (the rule above), read but not parsed
    (a checkpoint's verified against its manifest), or None."""
    kind = kind or source_kind(path)
    if kind in CHECKPOINT_KINDS:
        return _checkpoint_tokenizer(Path(path))
    if kind == "hf" and os.path.lexists(Path(path) / TOKENIZER):  # read inside the directory, bounded
        return TokenizerFile(read_hf_file(path, TOKENIZER), str(Path(path) / TOKENIZER), own=False)
    return None


def text_tokenizer(tokenizer: Tokenizer | None, vocab_size: int) -> Tokenizer:
    """The source's tokenizer, or, for a model without one, the stand-in for its vocabulary size."""
    return tokenizer if tokenizer is not None else stand_in_tokenizer(vocab_size)


def tokenizer_at(name: str | Path) -> CharTokenizer | HFTokenizer | None:
    """A ``--tokenizer`` argument: a model source (by the rule), a tokenizer directory, the ``tokenizer.json``
    of either (read as its directory), or "char" (None: the text's own characters)."""
    if str(name) == CHAR:
        return None
    path = Path(name)
    if path.name == TOKENIZER_FILE and path.is_file():
        path = path.parent  # a directory's own tokenizer.json names the directory: the rule reads it from there
    if is_checkpoint(path) or is_hf_directory(path):
        tokenizer = tokenizer_of(path)
        if tokenizer is None:
            raise TokenizerError(f"{name}: this model source carries no tokenizer; give a tokenizer directory "
                                 f"(blockspec tokenizer train) or '{CHAR}'")
        return tokenizer
    tokenizer = read_tokenizer_directory(path) if path.is_dir() else None
    if tokenizer is None:
        raise TokenizerError(f"{name}: {_what_is_at(path)}; expected a directory holding {TOKENIZER_FILE} (blockspec "
                             f"tokenizer train's output, a Hugging Face model), that {TOKENIZER_FILE} itself, a "
                             f"blockspec checkpoint, or '{CHAR}'")
    return tokenizer


def _what_is_at(path: Path) -> str:
    if path.is_dir():
        return f"is a directory without {TOKENIZER_FILE}"
    if path.is_file():
        return f"is a file, not a {TOKENIZER_FILE}"
    return "does not exist" if not os.path.lexists(path) else "is a link to nothing"


def _checkpoint_tokenizer(path: Path) -> TokenizerFile | None:
    from blockspec.checkpoint.directory import read_extra_file  # verified against the manifest; needs torch

    files = read_manifest(path).files
    for name, own in ((TOKENIZER_FILE, True), (CARRIED_TOKENIZER, False)):
        if name in files:
            return TokenizerFile(read_extra_file(path, name), f"{path}/{name}", own=own)
    return None


def _read(reader: Callable[[], CharTokenizer | HFTokenizer]) -> CharTokenizer | HFTokenizer:
    """A model source's tokenizer that cannot be read is the source's fault: a CheckpointError."""
    try:
        return reader()
    except TokenizerError as error:
        raise CheckpointError(str(error)) from None
