"""The files a Hugging Face export of a model source writes beside its weights: what the model carries, and
its tokenizer (the one rule's) as transformers reads it.

A model keeps the files it came with from Hugging Face (``model.carried``); a trained checkpoint's own
tokenizer (the rule's first step) is no such file, so an export would leave it behind. Here it joins
them, in the form ``AutoTokenizer.from_pretrained`` loads:

- a BPE (``blockspec tokenizer train``) is a tokenizers-library ``tokenizer.json`` already: written as it is;
- a character vocabulary becomes one: a ``WordLevel`` model whose pre-tokenizer splits every character
  and whose decoder joins them back, so encoding and decoding give blockspec's ids and text exactly (a
  character outside the vocabulary is refused by both). It is written by hand, so the export needs no
  ``tokenizers`` package.

Each comes with a ``tokenizer_config.json`` naming ``PreTrainedTokenizerFast``: the class of the model type
(GPT-2's, Llama's) would rebuild the tokenizer from its own files, or add a BOS token it does not know.
A model's carried tokenizer files that describe another tokenizer than the rule's are left out: an
export holds one tokenizer. Torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from blockspec.data.tokenizer import FAST_TOKENIZER, CharTokenizer, HFTokenizer, tokenizer_bytes, transformers_config
from blockspec.interop.hf_layout import TOKENIZER, TOKENIZER_CONFIG, TOKENIZER_FILES
from blockspec.sources.source import Source
from blockspec.sources.tokenizers import tokenizer_file_of

EVERY_CHARACTER = r"[\s\S]"  # one match per character, line breaks included (no flag needed)

__all__ = ["export_files", "hf_tokenizer_json"]


def export_files(source: Source, carried: Mapping[str, bytes]) -> dict[str, bytes]:
    """The side files an export of ``source`` writes: ``carried`` (the model's), with the source's tokenizer
    (read only where it is not the carried ``tokenizer.json`` itself, which goes back unread)."""
    found = tokenizer_file_of(source.path, source.kind)
    if found is None or carried.get(TOKENIZER) == found.data:
        return dict(carried)  # none, or the one it came with: written back as it came, with its settings
    tokenizer = found.tokenizer()
    kept = {name: file for name, file in carried.items() if name not in TOKENIZER_FILES}
    config = _tokenizer_config(tokenizer, source.spec.model.context_length)
    return {**kept, TOKENIZER: hf_tokenizer_json(tokenizer), TOKENIZER_CONFIG: config}


def hf_tokenizer_json(tokenizer: CharTokenizer | HFTokenizer) -> bytes:
    """``tokenizer`` as a tokenizers-library ``tokenizer.json``: a BPE's own bytes, or characters as WordLevel."""
    if isinstance(tokenizer, HFTokenizer):
        return tokenizer_bytes(tokenizer)
    document = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": EVERY_CHARACTER}, "behavior": "Isolated",
                          "invert": False},
        "post_processor": None, "decoder": {"type": "Fuse"},
        "model": {"type": "WordLevel", "vocab": {char: i for i, char in enumerate(tokenizer.chars)},
                  "unk_token": "<unk>"},  # not in the vocabulary: an unknown character is refused, as blockspec does
    }
    return (json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def _tokenizer_config(tokenizer: CharTokenizer | HFTokenizer, context_length: int) -> bytes:
    """The class, the special tokens' roles (``eos_token``: the one rule ``tokenizer train`` writes them by)."""
    roles = transformers_config(tokenizer) if isinstance(tokenizer, HFTokenizer) else {}
    config = {**roles, "tokenizer_class": FAST_TOKENIZER, "model_max_length": context_length,
              "clean_up_tokenization_spaces": False}  # decode gives the text back, spaces before punctuation too
    return (json.dumps(config, indent=2, sort_keys=True) + "\n").encode("utf-8")
