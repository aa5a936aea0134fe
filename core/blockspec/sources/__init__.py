"""Model sources: one call opens any path a model can come from, one rule picks its tokenizer.

``open_source(path)`` -> ``Source`` (kind, spec with its lock applied, tokenizer, carried
Hugging Face files, training document, model). ``tokenizer_of`` is the one answer to "which
tokenizer goes with this source". The old ``blockspec.sources`` / ``blockspec.interop.sources``
names (``load_spec_or_checkpoint``, ``load_model``, ``load``, ``source_kind``) live here too.

Importing this package loads no torch; a model, or a checkpoint's verified file, does.
"""

from __future__ import annotations

from blockspec.sources.kind import CHECKPOINT_KINDS, SourceKind, is_checkpoint, source_kind
from blockspec.sources.source import (Source, given_path, load, load_model, load_spec_or_checkpoint, load_tokenizer,
                                      open_source)
from blockspec.sources.tokenizers import stand_in_tokenizer, text_tokenizer, tokenizer_at, tokenizer_of

__all__ = [
    "CHECKPOINT_KINDS",
    "Source",
    "SourceKind",
    "given_path",
    "is_checkpoint",
    "load",
    "load_model",
    "load_spec_or_checkpoint",
    "load_tokenizer",
    "open_source",
    "source_kind",
    "stand_in_tokenizer",
    "text_tokenizer",
    "tokenizer_at",
    "tokenizer_of",
]
