"""Text to token ids for character-level models, and a byte fallback for large vocabularies.

``CharTokenizer`` is the stable, small API other tools reuse (training, trace, explore):
``from_text``, ``encode``, ``decode``, ``to_dict`` / ``from_dict``, ``default``.
Torch-free on purpose.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from attrs import field, frozen

from blockspec.checkpoint.atomic import atomic_directory
from blockspec.checkpoint.contained import CARRIED_LIMIT, read_contained
from blockspec.errors import BlockspecError, Problem
from blockspec.outputs.kinds import directory_kind
from blockspec.outputs.targets import check_writable_target
from blockspec.spec.schema import MAX_VOCAB_SIZE

if TYPE_CHECKING:
    import numpy as np

# The sorted set of characters of the Tiny Shakespeare text: the 65-token vocabulary of the
# chapter's character model (id 0 is "\n", id 1 is " ", ...).
TINY_SHAKESPEARE_CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

TOKENIZER_FILE = "tokenizer.json"  # a tokenizer directory's tokenizer (blockspec tokenizer train writes it)
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"  # beside it, for transformers: which special token is which
# what ``tokenizer train --force`` may replace: a directory holding its tokenizer.json (and config) and nothing else
TOKENIZER_DIRECTORY = directory_kind("a tokenizer directory", markers=(TOKENIZER_FILE,),
                                     entries=(TOKENIZER_FILE, TOKENIZER_CONFIG_FILE))
# GPT-2's one special token, which ends every document (and begins one): tokenizer train's default
END_OF_TEXT = "<|endoftext|>"
DEFAULT_SPECIAL = (END_OF_TEXT,)
# What a tokenizer's end-of-text token is called, first match wins: GPT-2's, Pythia's, Qwen's, OLMo's; Llama 3's;
# Llama 2's, Mistral's, T5's; Gemma's; and the plain name `tokenizer train --special` users choose.
END_OF_TEXT_NAMES = (END_OF_TEXT, "<|end_of_text|>", "</s>", "<eos>", "<|eos|>")
BEGIN_OF_TEXT_NAMES = ("<|begin_of_text|>", "<s>", "<bos>", "<|bos|>", "<|startoftext|>")
CHAR = "char"  # the name that asks for a text's own characters instead of a tokenizer directory
BYTE_VOCAB = 256
# What a trained tokenizer may hold: what a spec's vocabulary may (the BPE trainer reserves room for every
# token it is asked for, and aborts the process past what the machine has: 10**9 needs ~40 GB).
MAX_TRAINED_VOCAB = MAX_VOCAB_SIZE


class TokenizerError(BlockspecError, ValueError):
    """Text cannot be encoded (or ids decoded) with the chosen vocabulary."""


class Tokenizer(Protocol):
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> str: ...

    def describe(self) -> str: ...


def _distinct_chars(chars: str) -> str:
    if not chars:
        raise TokenizerError("a character vocabulary needs at least one character")
    if len(set(chars)) != len(chars):
        repeated = sorted({c for c in chars if chars.count(c) > 1})
        raise TokenizerError(f"characters must be distinct, found repeats: {repeated!r}")
    return chars


@functools.lru_cache(maxsize=16)
def _code_table(chars: str) -> np.ndarray:
    """Code point -> id for ``chars``, -1 elsewhere, one entry past the largest (where larger code points go)."""
    import numpy as np  # here, not at the top: importing the tokenizers costs no numpy

    codes = np.frombuffer(chars.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)  # (|V|,)
    table = np.full(int(codes.max()) + 2, -1, dtype=np.int64)  # (max code point + 2,)
    table[codes] = np.arange(len(codes))
    table.flags.writeable = False
    return table


@frozen
class CharTokenizer:
    """Token id i is the i-th character of ``chars``."""

    chars: str = field(converter=_distinct_chars)

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The sorted set of the characters of ``text`` (the chapter's recipe)."""
        return cls("".join(sorted(set(text))))

    @classmethod
    def default(cls) -> CharTokenizer:
        """The 65 characters of Tiny Shakespeare; no data file needed."""
        return cls(TINY_SHAKESPEARE_CHARS)

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        """Each character's id, looked up by code point in a table (a dict lookup per character cost ~3% of
        scoring the tiny model); a character outside the vocabulary is refused at its position."""
        import numpy as np

        table = _code_table(self.chars)
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)  # (len(text),)
        ids = table[np.minimum(codes, len(table) - 1)]  # (len(text),) -1 where not in the vocabulary
        if len(ids) and ids.min() < 0:
            position = int(np.argmax(ids < 0))
            raise TokenizerError(
                f"character {text[position]!r} at position {position} is not in the {self.vocab_size}-character "
                f"vocabulary; use only {_preview(self.chars)}"
            )
        return ids.tolist()

    def decode(self, ids: Iterable[int]) -> str:
        ids = list(ids)
        if ids and not (0 <= min(ids) and max(ids) < self.vocab_size):
            bad = next(i for i in ids if not 0 <= i < self.vocab_size)
            raise TokenizerError(f"token id {bad} is outside the vocabulary 0..{self.vocab_size - 1}")
        return "".join(map(self.chars.__getitem__, ids))

    def describe(self) -> str:
        return f"characters ({self.vocab_size})"

    def to_dict(self) -> dict[str, Any]:
        return {"type": "char", "chars": self.chars}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CharTokenizer:
        if data.get("type") != "char" or not isinstance(data.get("chars"), str):
            raise TokenizerError(f"expected {{'type': 'char', 'chars': str}}, found keys {sorted(data)}")
        return cls(data["chars"])


@frozen
class ByteTokenizer:
    """UTF-8 bytes as ids 0..255: lets any vocabulary of at least 256 tokens take text.

    Not the model's own tokenizer (GPT-2's BPE orders its bytes differently): meant for
    following an input through a model, not for meaningful predictions.
    """

    vocab_size: int = BYTE_VOCAB

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(i for i in ids if 0 <= i < BYTE_VOCAB).decode("utf-8", errors="replace")

    def describe(self) -> str:
        return "UTF-8 bytes as ids 0-255 (not the model's own tokenizer)"


class HFTokenizer:
    """A Hugging Face ``tokenizer.json`` (BPE, SentencePiece-converted, ...) through the ``tokenizers`` library:
    what an imported checkpoint carries, so its text comes out as the original model's did.

    ``tokenizers`` is optional (``pip install 'blockspec[hf]'``, or it comes with ``transformers``); it is
    imported only when such a tokenizer is read.
    """

    def __init__(self, data: bytes, *, source: str) -> None:
        try:
            from tokenizers import Tokenizer as Backend
        except ImportError:
            raise TokenizerError(f"{source}: reading a Hugging Face tokenizer.json needs the 'tokenizers' package: "
                                 "pip install 'blockspec[hf]'") from None
        try:
            self._backend = Backend.from_str(data.decode("utf-8"))
        except (UnicodeDecodeError, Exception) as error:  # tokenizers raises a bare Exception for bad JSON
            raise TokenizerError(f"{source}: not a Hugging Face tokenizer: {str(error).splitlines()[0]:.200}") from None
        self.data, self.source = data, source  # kept verbatim: a checkpoint carries it, meta.json hashes it
        self.vocab_size: int = self._backend.get_vocab_size(with_added_tokens=True)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def special_tokens(self) -> dict[str, int]:
        """Its special tokens (matched whole before any splitting, never merged), by id: content -> id."""
        added = sorted(self._backend.get_added_tokens_decoder().items())
        return {token.content: index for index, token in added if token.special}

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Many texts at once: the library spreads them over its threads."""
        return [encoding.ids for encoding in self._backend.encode_batch(texts, add_special_tokens=False)]

    def encode(self, text: str) -> list[int]:
        return self._backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Iterable[int]) -> str:
        return self._backend.decode(list(ids), skip_special_tokens=False)

    def describe(self) -> str:
        return f"Hugging Face tokenizer.json ({self.vocab_size} tokens)"


def end_of_text(tokenizer: CharTokenizer | HFTokenizer) -> str | None:
    """The special token that ends a document (``END_OF_TEXT_NAMES``, first match), or None: what separates files."""
    special = tokenizer.special_tokens if isinstance(tokenizer, HFTokenizer) else {}
    return next((name for name in END_OF_TEXT_NAMES if name in special), None)


def check_special(tokens: Sequence[str]) -> tuple[str, ...]:
    """Special tokens as given: each non-empty, without surrounding space, and given once."""
    for token in tokens:
        if not token or token != token.strip():
            found = "an empty token" if not token.strip() else repr(token)
            raise TokenizerError(Problem(path="special", expected="special tokens without surrounding spaces, "
                                         "like <|endoftext|>", found=found))
        if tokens.count(token) > 1:
            raise TokenizerError(Problem(path="special", expected="each special token once", found=f"{token!r} twice"))
    return tuple(tokens)


def train_bpe(texts: Iterator[str], vocab_size: int, *, special: Sequence[str] = DEFAULT_SPECIAL,
              source: str = "<text>") -> HFTokenizer:
    """A byte-level BPE (GPT-2's kind: any text encodes, nothing is unknown) learnt from ``texts``.

    ``special`` tokens take the first ids, in their order, and are never split or merged (GPT-2's one
    end-of-text token by default). ``vocab_size`` counts them and the 256 byte tokens.
    """
    special = check_special(special)
    if vocab_size < BYTE_VOCAB + len(special):
        raise TokenizerError(Problem(
            path="vocab_size", message=f"a byte-level BPE needs at least {BYTE_VOCAB + len(special)} tokens (one per "
            f"byte, and {len(special)} special), found {vocab_size}", hint=f"use {{vocab_size}} "
            f"{BYTE_VOCAB + len(special)} or more", names={"vocab_size": "vocab_size"}))
    if vocab_size > MAX_TRAINED_VOCAB:
        raise TokenizerError(Problem(path="vocab_size", expected=f"at most {MAX_TRAINED_VOCAB:,} tokens (as a spec's "
                                     "[model] vocab_size)", found=f"{vocab_size:,}"))
    library = _tokenizers(source)
    backend = library.Tokenizer(library.models.BPE())
    backend.pre_tokenizer = library.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = library.decoders.ByteLevel()
    trainer = library.trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, special_tokens=list(special),
                                          initial_alphabet=library.pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(texts, trainer)
    return HFTokenizer(backend.to_str().encode("utf-8"), source=source)


def _tokenizers(source: str):
    try:
        import tokenizers
    except ImportError:
        raise TokenizerError(f"{source}: a BPE tokenizer needs the 'tokenizers' package: "
                             "pip install 'blockspec[hf]'") from None
    return tokenizers


def tokenizer_bytes(tokenizer: CharTokenizer | HFTokenizer) -> bytes:
    """What a checkpoint's tokenizer.json holds: the characters, or the Hugging Face tokenizer.json itself."""
    if isinstance(tokenizer, HFTokenizer):
        return tokenizer.data
    return json.dumps(tokenizer.to_dict()).encode("utf-8")


def tokenizer_from_bytes(data: bytes, *, source: str) -> CharTokenizer | HFTokenizer:
    """The inverse of ``tokenizer_bytes``: {"type": "char", ...} is characters, anything else Hugging Face's."""
    try:
        document = json.loads(data)
    except ValueError as error:
        raise TokenizerError(f"{source}: not valid JSON: {error}") from None
    if isinstance(document, dict) and document.get("type") == "char":
        return CharTokenizer.from_dict(document)
    return HFTokenizer(data, source=source)


def stand_in_tokenizer(vocab_size: int) -> Tokenizer:
    """What text becomes for a model that carries no tokenizer: Tiny Shakespeare's characters, or bytes for >= 256.

    Not any model's own tokenizer (that is ``blockspec.sources``' rule): it lets an input be
    followed through a random or tokenizer-less model, not give meaningful predictions.
    """
    if vocab_size == len(TINY_SHAKESPEARE_CHARS):
        return CharTokenizer.default()
    if vocab_size >= BYTE_VOCAB:
        return ByteTokenizer()
    raise TokenizerError(Problem(
        message=f"no character vocabulary is known for vocab_size {vocab_size} (known: "
                f"{len(TINY_SHAKESPEARE_CHARS)}, the Tiny Shakespeare characters; or >= {BYTE_VOCAB}, UTF-8 bytes)",
        hint="give {token_ids} instead of {text}", names={"token_ids": "token ids", "text": "text"}))


def write_tokenizer_directory(tokenizer: HFTokenizer, directory: str | Path, *, overwrite: bool = False) -> Path:
    """A tokenizer directory: ``directory/tokenizer.json``, as ``blockspec tokenizer train`` leaves it.

    Written whole and atomically; an existing tokenizer directory is replaced only with
    ``overwrite``, and any other directory never (``TOKENIZER_DIRECTORY``).
    """
    out = check_writable_target(directory, kind=TOKENIZER_DIRECTORY, overwrite=overwrite)
    with atomic_directory(out, overwrite=overwrite) as staging:
        (staging / TOKENIZER_FILE).write_bytes(tokenizer.data)
        (staging / TOKENIZER_CONFIG_FILE).write_text(json.dumps(transformers_config(tokenizer), indent=1) + "\n")
    return out / TOKENIZER_FILE


FAST_TOKENIZER = "PreTrainedTokenizerFast"  # transformers' class for a bare tokenizer.json


def transformers_config(tokenizer: HFTokenizer) -> dict[str, str]:
    """tokenizer_config.json: the roles ``AutoTokenizer`` reads (``eos_token``, ``bos_token``), by the names' rule.

    A tokenizer without a begin-of-text token begins a text with its end-of-text token, as GPT-2's does."""
    eos = end_of_text(tokenizer)
    bos = next((name for name in BEGIN_OF_TEXT_NAMES if name in tokenizer.special_tokens), eos)
    roles = {"bos_token": bos, "eos_token": eos}
    return {"tokenizer_class": FAST_TOKENIZER, **{k: v for k, v in roles.items() if v is not None}}


def read_tokenizer_directory(directory: str | Path) -> CharTokenizer | HFTokenizer | None:
    """The tokenizer of a tokenizer directory (or a prepared dataset's), or None where it holds none.

    Its file is read only as a regular file inside the directory (``checkpoint.contained``): a link out of
    it, a FIFO or a huge file is refused in one line, never read."""
    path = Path(directory) / TOKENIZER_FILE
    if not os.path.lexists(path):
        return None
    data = read_contained(path, (Path(os.path.realpath(directory)),), CARRIED_LIMIT)
    return tokenizer_from_bytes(data, source=str(path))


def parse_ids(text: str, vocab_size: int) -> list[int]:
    """"1,2,3" -> [1, 2, 3], each checked against the vocabulary."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise TokenizerError(Problem(path="ids", expected="comma-separated token ids like 1,2,3", found="nothing"))
    ids = []
    for part in parts:
        if not part.lstrip("-").isdigit():
            raise TokenizerError(Problem(path="ids", expected="an integer token id", found=repr(part)))
        ids.append(int(part))
    return check_ids(ids, vocab_size)


def check_ids(ids: Sequence[int], vocab_size: int) -> list[int]:
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise TokenizerError(Problem(path="ids", message=f"token id {bad[0]} is outside the vocabulary "
                                                         f"0..{vocab_size - 1}"))
    return list(ids)


def _preview(chars: str) -> str:
    shown = repr(chars)
    return shown if len(shown) <= 80 else shown[:77] + "...'"
