"""Prepared datasets: a corpus tokenised once into raw uint16/uint32 arrays that training memory-maps.

``prepare`` streams the text in pieces (constant memory, whatever the corpus size), appends every
token to ``train.bin``, then moves the last 10% to ``val.bin``: the same 90/10 split as
``CharDataset``. Files are documents: the tokenizer's end-of-text token (``tokenizer.end_of_text``) goes
between two files, or, for a tokenizer without one, a line break where a file does not end with one, so
that no document runs into the next. ``meta.json`` records the tokenizer's sha256, so data and tokenizer cannot be
mixed up silently; the tokenizer itself is copied beside the arrays. The directory is written
atomically (``atomic_directory``), and replaces only a prepared dataset (``PREPARED``).

``PreparedDataset.batch`` draws windows exactly as ``CharDataset.batch`` does (same generator,
same offsets), so a batch is still a pure function of (seed, stream, index).

Instruction data (``prepared_instruct``) adds a loss mask per split, ``train.mask`` and
``val.mask``: one uint8 per token, 1 where that token, as a target, is scored (a response's, and the
end-of-text token that ends it). ``meta.json``'s ``loss_mask`` lists them and what each split holds; a
target the mask does not score comes out of ``batch`` as ``IGNORED_TARGET``. A dataset without a
``loss_mask`` reads and trains as before.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
from attrs import frozen

from blockspec.checkpoint.atomic import atomic_directory
from blockspec.outputs.kinds import directory_kind
from blockspec.outputs.targets import check_writable_target
from blockspec.outputs.lock import folder_lock
from blockspec.spec.documents import structure_document
from blockspec.spec.validators import Check
from blockspec.data.dataset import IGNORED_TARGET, TRAIN_FRACTION, DataError, check_windows, window_offsets
from blockspec.data.measure import TextSize, streamed_size
from blockspec.data.textfiles import check_text_files, chunks
from blockspec.data.tokenizer import (TOKENIZER_FILE, CharTokenizer, HFTokenizer, TokenizerError, end_of_text,
                                      tokenizer_bytes, tokenizer_from_bytes)

FORMAT = "blockspec-prepared-data"
VERSION = 1
META_FILE = "meta.json"
SPLIT_FILES = {"train": "train.bin", "val": "val.bin"}
MASK_FILES = {"train": "train.mask", "val": "val.mask"}  # instruction data: 1 where a target is scored (uint8)
MASK_DTYPE = np.dtype(np.uint8)
BATCH_CHUNKS = 4  # pieces encoded together (the tokenizers library spreads them over its threads)
PIECE_BYTES = 1 << 18  # 256 KiB: the library holds about 1 KB per token while it encodes a piece
COPY_TOKENS = 1 << 22
DECODE_TOKENS = 1 << 20  # tokens decoded at a time when a split's bytes are counted
LINE_BREAK = "\n"
# what ``data prepare --force`` may replace: a directory holding what prepare writes and nothing else
PREPARED = directory_kind("a prepared dataset", markers=(META_FILE,),
                          entries=(META_FILE, *SPLIT_FILES.values(), *MASK_FILES.values(), TOKENIZER_FILE))

AnyTokenizer = CharTokenizer | HFTokenizer


def tokenizer_sha256(tokenizer: AnyTokenizer) -> str:
    return hashlib.sha256(tokenizer_bytes(tokenizer)).hexdigest()


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 while every id fits (65,536 tokens), else uint32: half the disk and page cache when it can."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def char_tokenizer(paths: Sequence[str | Path]) -> CharTokenizer:
    """The sorted set of the characters of every file, read piece by piece, and the line break between them."""
    seen: set[str] = set()
    for index, path in enumerate(paths):
        last = ""
        for last in chunks(path):
            seen.update(last)
        if index < len(paths) - 1 and not last.endswith(LINE_BREAK):
            seen.add(LINE_BREAK)  # what will end this file (``separator``)
    return CharTokenizer("".join(sorted(seen)))


def separator(tokenizer: AnyTokenizer) -> str:
    """What goes between two files: the end-of-text token, else a line break (where a file lacks its own)."""
    return end_of_text(tokenizer) or LINE_BREAK


# ---------------------------------------------------------------- writing


def prepare(paths: Sequence[str | Path], tokenizer: AnyTokenizer | None, out: str | Path, *,
            overwrite: bool = False, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Tokenise ``paths`` into ``out`` (train.bin, val.bin, tokenizer.json, meta.json); returns meta.json.

    Written beside ``out`` and renamed at the end, so ``out`` is never half-written, and an old
    dataset there survives any failure. ``progress`` is told how many bytes of text each piece held.
    """
    target = check_writable_target(out, kind=PREPARED, overwrite=overwrite, inputs=paths)
    with folder_lock(target):  # a second writer of this folder is refused here, before any text is read
        check_text_files(paths)
        tokenizer = tokenizer or char_tokenizer(paths)
        with atomic_directory(target, overwrite=overwrite) as staging:
            return _write(paths, tokenizer, staging, progress)


def _write(paths: Sequence[str | Path], tokenizer: AnyTokenizer, folder: Path,
           progress: Callable[[int], None] | None) -> dict[str, Any]:
    dtype = token_dtype(tokenizer.vocab_size)
    with (folder / SPLIT_FILES["train"]).open("wb") as stream:
        for ids in _encoded(paths, tokenizer, progress):
            np.asarray(ids, dtype=dtype).tofile(stream)
    total = (folder / SPLIT_FILES["train"]).stat().st_size // dtype.itemsize
    counts = split_at(folder, SPLIT_FILES, dtype, int(total * TRAIN_FRACTION))
    return write_meta(folder, tokenizer, dtype, counts, paths)


def write_meta(folder: Path, tokenizer: AnyTokenizer, dtype: np.dtype, counts: dict[str, int],
                paths: Sequence[str | Path], **more: Any) -> dict[str, Any]:
    """meta.json (and the tokenizer beside it): what the splits hold, and ``more`` (a loss mask's record)."""
    sizes = {split: split_text_size(tokenizer, _read_split(folder, SPLIT_FILES[split], dtype, counts[split]))
             for split in counts}
    (folder / TOKENIZER_FILE).write_bytes(tokenizer_bytes(tokenizer))
    meta = {"format": FORMAT, "version": VERSION, "tokenizer_sha256": tokenizer_sha256(tokenizer),
            "tokenizer": tokenizer.describe(), "vocab_size": tokenizer.vocab_size, "dtype": dtype.name,
            "train_fraction": TRAIN_FRACTION, "tokens": counts, "sources": [Path(p).name for p in paths],
            "separator": separator(tokenizer), "bytes": {split: size.bytes for split, size in sizes.items()},
            "characters": {split: size.characters for split, size in sizes.items()}, **more}
    (folder / META_FILE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return meta


def _encoded(paths: Sequence[str | Path], tokenizer: AnyTokenizer,
             progress: Callable[[int], None] | None) -> Iterator[list[int]]:
    """Token ids, file after file with the ``separator`` between them."""
    between, ends_line = separator(tokenizer), True
    for index, path in enumerate(paths):
        if index and not (between == LINE_BREAK and ends_line):
            yield _separator_ids(tokenizer, between, after=paths[index - 1])
        ends_line = yield from _encoded_file(path, tokenizer, progress)


def _separator_ids(tokenizer: AnyTokenizer, between: str, *, after: str | Path) -> list[int]:
    """The separator's ids (a special token is matched whole: one id); a vocabulary without it is said so."""
    try:
        return tokenizer.encode(between)
    except TokenizerError:
        raise TokenizerError(f"{after}: does not end with a line break, and {tokenizer.describe()} hold none to put "
                             "between it and the next file; end the file with one") from None


def _encoded_file(path: str | Path, tokenizer: AnyTokenizer,
                  progress: Callable[[int], None] | None) -> Generator[list[int], None, bool]:
    """One file's ids, a group of pieces at a time (constant memory); returns whether it ends with a line break."""
    group: list[str] = []
    last = ""
    for last in chunks(path, PIECE_BYTES):
        group.append(last)
        if len(group) == BATCH_CHUNKS:
            yield from _encode_group(tokenizer, group, progress)
            group = []
    yield from _encode_group(tokenizer, group, progress)
    return last.endswith(LINE_BREAK)


def _encode_group(tokenizer: AnyTokenizer, texts: list[str],
                  progress: Callable[[int], None] | None) -> Iterator[list[int]]:
    many = tokenizer.encode_batch(texts) if isinstance(tokenizer, HFTokenizer) else map(tokenizer.encode, texts)
    for text, ids in zip(texts, many):
        yield ids
        if progress is not None:
            progress(len(text.encode("utf-8")))


def split_at(folder: Path, files: dict[str, str], dtype: np.dtype, cut: int) -> dict[str, int]:
    """Move what follows item ``cut`` of the train file to the val file, a few MiB at a time."""
    train = folder / files["train"]
    total = train.stat().st_size // dtype.itemsize
    with train.open("rb") as source, (folder / files["val"]).open("wb") as val:
        source.seek(cut * dtype.itemsize)
        while block := source.read(COPY_TOKENS * dtype.itemsize):
            val.write(block)
    os.truncate(train, cut * dtype.itemsize)
    return {"train": cut, "val": total - cut}


def split_text_size(tokenizer: AnyTokenizer, ids: np.ndarray) -> TextSize:
    """The size of the text a split's ids decode to, a block of ``DECODE_TOKENS`` at a time (constant memory)."""
    blocks = (ids[start : start + DECODE_TOKENS].tolist() for start in range(0, len(ids), DECODE_TOKENS))
    return streamed_size(tokenizer, blocks)


def _read_split(folder: Path, name: str, dtype: np.dtype, tokens: int) -> np.ndarray:
    """The memory map of file ``name`` (a split's tokens or mask), or an empty array for none."""
    if tokens == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(folder / name, dtype=dtype, mode="r", shape=(tokens,))


# ---------------------------------------------------------------- reading

# Module-level aliases: a lambda inside a class's (string) annotation cannot see this module's names.
Count = Annotated[int, Check(lambda n: n >= 0, "a token count >= 0")]
FormatName = Annotated[str, Check(lambda text: text == FORMAT, repr(FORMAT))]
FormatVersion = Annotated[int, Check(lambda v: v == VERSION, f"{VERSION} (this blockspec reads version {VERSION})")]
VocabSize = Annotated[int, Check(lambda n: n >= 1, "a positive vocabulary size")]
DtypeName = Annotated[str, Check(lambda name: name in ("uint16", "uint32"), "'uint16' or 'uint32'")]


@frozen(kw_only=True)
class SplitCounts:
    train: Count
    val: Count


TrainMask = Annotated[str, Check(lambda name: name == MASK_FILES["train"], repr(MASK_FILES["train"]))]
ValMask = Annotated[str, Check(lambda name: name == MASK_FILES["val"], repr(MASK_FILES["val"]))]
MaskDtype = Annotated[str, Check(lambda name: name == MASK_DTYPE.name, repr(MASK_DTYPE.name))]


@frozen(kw_only=True)
class MaskFiles:
    train: TrainMask
    val: ValMask


@frozen(kw_only=True)
class MaskDocument:
    """meta.json's ``loss_mask`` (instruction data): the mask files and what each split holds."""

    files: MaskFiles
    dtype: MaskDtype
    examples: SplitCounts
    scored_tokens: SplitCounts
    scored_bytes: SplitCounts  # UTF-8 bytes of the scored text (the responses' sides)
    scored_characters: SplitCounts
    prompt_key: str
    response_key: str
    template: str


@frozen(kw_only=True)
class MetaDocument:
    """meta.json, checked field by field when a dataset is opened."""

    format: FormatName
    version: FormatVersion
    tokenizer_sha256: str
    tokenizer: str
    vocab_size: VocabSize
    dtype: DtypeName
    train_fraction: float
    tokens: SplitCounts
    sources: list[str]
    separator: str | None = None  # what went between two files (datasets prepared before it was recorded: None)
    bytes: SplitCounts | None = None  # UTF-8 bytes of each split's tokens decoded (older datasets: None)
    characters: SplitCounts | None = None  # and their characters
    loss_mask: MaskDocument | None = None  # instruction data only: which targets the loss scores


class PreparedDataset:
    """The memory-mapped splits of a prepared directory and its tokenizer; batches as ``CharDataset``'s."""

    def __init__(self, directory: str | Path) -> None:
        self.source = str(directory)
        self.meta = _read_meta(Path(directory))
        self.tokenizer = _read_tokenizer(Path(directory), self.meta)
        self.splits = {split: _memmap(Path(directory), split, self.meta) for split in SPLIT_FILES}
        self.masks = None if self.meta.loss_mask is None else _masks(Path(directory), self.meta, self.meta.loss_mask)
        self.masked = self.masks is not None
        self._sizes: dict[str, TextSize] = {}

    def split_size(self, split: str) -> tuple[int, TextSize]:
        """The split's tokens and the size of their text: as meta.json records it, or (a dataset prepared
        before it did) decoded once. Instruction data: its scored tokens and the text of the responses."""
        if self.meta.loss_mask is not None:  # the loss is a mean over scored tokens: their count and text
            mask = self.meta.loss_mask
            return getattr(mask.scored_tokens, split), TextSize(bytes=getattr(mask.scored_bytes, split),
                                                                characters=getattr(mask.scored_characters, split))
        if split not in self._sizes:
            recorded = self.meta.bytes is not None and self.meta.characters is not None
            self._sizes[split] = (TextSize(bytes=getattr(self.meta.bytes, split),
                                           characters=getattr(self.meta.characters, split)) if recorded
                                  else split_text_size(self.tokenizer, self.splits[split]))
        return len(self.splits[split]), self._sizes[split]

    def check_tokenizer(self, tokenizer: AnyTokenizer, *, source: str) -> None:
        """Refuse a model whose tokenizer (a checkpoint's) is not the one the data was tokenised with."""
        if tokenizer_sha256(tokenizer) != self.meta.tokenizer_sha256:
            raise DataError(f"{self.source}: was tokenised with another tokenizer than {source}'s "
                            f"({self.meta.tokenizer}, sha256 {self.meta.tokenizer_sha256[:12]}, vs "
                            f"{tokenizer.describe()}, sha256 {tokenizer_sha256(tokenizer)[:12]}); "
                            f"prepare the data again with --tokenizer {source}")

    def check_fits(self, vocab_size: int, context_length: int) -> None:
        """Refuse a vocabulary smaller than the tokenizer's, or a split too short for one window."""
        if self.tokenizer.vocab_size > vocab_size:
            raise DataError(f"{self.source}: its tokenizer has {self.tokenizer.vocab_size} tokens, but the spec's "
                            f"$.model.vocab_size is {vocab_size}; set vocab_size = {self.tokenizer.vocab_size} "
                            "(or more)")
        check_windows(self.source, self.splits, context_length, unit="tokens", remedy="prepare more text")

    def batch(self, split: str, *, size: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``size`` random windows: inputs x and next-token targets y, (size, length) each; a target the loss
        mask does not score (instruction data: a prompt's) is ``IGNORED_TARGET``."""
        windows, scored = self.windows(split, size=size, length=length, seed=seed)  # (B, T + 1) each
        x, y = windows[:, :-1], windows[:, 1:]
        return (x, y) if scored is None else (x, scored_targets(y, scored[:, 1:]))

    def windows(self, split: str, *, size: int, length: int, seed: int) -> tuple[torch.Tensor, np.ndarray | None]:
        """The ids of ``size`` random windows of ``length + 1`` tokens, and their loss mask (None without one)."""
        ids = self.splits[split]
        offsets = window_offsets(len(ids), size=size, length=length, seed=seed).tolist()  # (B,)
        windows = torch.from_numpy(np.stack([ids[o : o + length + 1] for o in offsets]).astype(np.int64))  # (B, T + 1)
        if self.masks is None:
            return windows, None
        return windows, np.stack([self.masks[split][o : o + length + 1] for o in offsets])  # (B, T + 1)


def scored_targets(targets: torch.Tensor, scored: np.ndarray) -> torch.Tensor:
    """``targets`` with ``IGNORED_TARGET`` where the mask ``scored`` (of their shape) is 0: what the loss skips."""
    return targets.masked_fill(torch.from_numpy(scored == 0), IGNORED_TARGET)


def _read_meta(directory: Path) -> MetaDocument:
    path = directory / META_FILE
    if not path.is_file():
        raise DataError(f"{directory}: has no {META_FILE}; expected a directory written by blockspec data prepare")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: not valid JSON: {error}") from None
    return structure_document(data, MetaDocument, file=str(path), error=DataError)


def _read_tokenizer(directory: Path, meta: MetaDocument) -> AnyTokenizer:
    path = directory / TOKENIZER_FILE
    if not path.is_file():
        raise DataError(f"{directory}: has no {TOKENIZER_FILE}; prepare the data again (blockspec data prepare)")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != meta.tokenizer_sha256:
        raise DataError(f"{path}: is not the tokenizer the data was prepared with (its sha256 differs from "
                        f"{META_FILE}'s tokenizer_sha256); prepare the data again with this tokenizer")
    try:
        return tokenizer_from_bytes(data, source=str(path))
    except TokenizerError as error:
        raise DataError(error.problems) from None


def _memmap(directory: Path, split: str, meta: MetaDocument) -> np.ndarray:
    return _checked_map(directory / SPLIT_FILES[split], np.dtype(meta.dtype), getattr(meta.tokens, split))


def _masks(directory: Path, meta: MetaDocument, mask: MaskDocument) -> dict[str, np.ndarray]:
    """Each split's loss mask, refused unless it holds a byte per token and the scored tokens meta.json counts
    (one pass over a byte a token: a mask of the right size but other content is caught too)."""
    masks = {split: _checked_map(directory / MASK_FILES[split], MASK_DTYPE, getattr(meta.tokens, split))
             for split in MASK_FILES}
    for split, values in masks.items():
        scored, expected = int(np.count_nonzero(values)), getattr(mask.scored_tokens, split)
        if scored != expected or (values > 1).any():
            raise DataError(f"{directory / MASK_FILES[split]}: expected {expected} scored tokens (ones, the rest "
                            f"zeros, per {META_FILE}), found {scored} non-zero bytes; prepare the data again")
    return masks


def _checked_map(path: Path, dtype: np.dtype, expected: int) -> np.ndarray:
    """The memory map of a split's file (tokens, or their mask), refused unless it holds ``expected`` items."""
    size = path.stat().st_size if path.is_file() else None
    if size != expected * dtype.itemsize:
        found = "no file" if size is None else f"{size} bytes"
        what = "tokens" if path.suffix == ".bin" else "mask bytes"
        raise DataError(f"{path}: expected {expected} {dtype.name} {what} ({expected * dtype.itemsize} bytes, per "
                        f"{META_FILE}), found {found}; prepare the data again")
    return _read_split(path.parent, path.name, dtype, expected)
