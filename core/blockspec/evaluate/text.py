"""``blockspec.evaluate_text``: loss, perplexity and bits per byte of a model on held-out text.

A text file is read piece by piece (``evaluate.texts``), its ids cut into strided windows as they come
(``evaluate.windows.batches``) and scored a batch at a time (``evaluate.perplexity``): memory holds one piece of
text, its ids and one batch, whatever the file's size. A prepared dataset directory gives its validation
split, read from its memory map. Several texts are scored separately (each one's first token has no left
context and is not scored) and summed: nats, tokens, bytes and characters.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from blockspec.assembly.memory import check_fits, evaluation_estimate
from blockspec.data.measure import TextSize, text_size
from blockspec.data.dataset import DataError
from blockspec.data.prepared import PreparedDataset
from blockspec.data.textfiles import check_text_files
from blockspec.data.tokenizer import Tokenizer, TokenizerError
from blockspec.errors import InputError, Problem
from blockspec.evaluate.perplexity import Perplexity, Scored, score_batches
from blockspec.evaluate.texts import TextTokens
from blockspec.evaluate.windows import batches
from blockspec.modules.transformer import Transformer
from blockspec.sources import Source, open_source, tokenizer_at
from blockspec.train.finite import check_finite_weights, non_finite_logits

DEFAULT_BATCH_SIZE = 8
DECODE_TOKENS = 1 << 16  # a prepared split's ids decoded this many at a time to count its bytes
Progress = Callable[[int], None]

__all__ = ["DEFAULT_BATCH_SIZE", "default_stride", "evaluate_text"]


def default_stride(context: int) -> int:
    """Half the context, as Hugging Face's guide: every token after the first window sees at least C/2 tokens."""
    return max(context // 2, 1)


def evaluate_text(source_or_model: Transformer | Source | str | os.PathLike[str],
                  files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, context: int | None = None,
                  stride: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
                  tokenizer: Tokenizer | str | os.PathLike[str] | None = None, device: torch.device | str | None = None,
                  memory_check: bool = True, progress: Progress | None = None) -> Perplexity:
    """Score ``files`` (UTF-8 text files, or prepared dataset directories: their validation split) with a model.

    ``source_or_model``: a Transformer (it stays where it is), a ``Source``, or the path of any source with
    weights (loaded on ``device``). ``tokenizer``: by default the source's own (a Transformer needs one given);
    a path is read as ``--tokenizer`` is (``sources.tokenizer_at``). ``context`` (default: the model's
    context length) and ``stride`` (default: half of it) set the windows (``evaluate.windows``).
    ``progress(bytes)`` is called as text is scored; ``memory_check=False`` skips the estimate's refusal.
    """
    paths = [Path(files)] if isinstance(files, (str, os.PathLike)) else [Path(f) for f in files]
    model, own_tokenizer, name = _model(source_or_model, device)
    config = model.spec.model
    context = _checked_context(context, config.context_length)
    stride = _checked_stride(default_stride(context) if stride is None else stride, context)
    _check_positive(batch_size, "batch_size")
    texts = _texts(paths, _tokenizer(tokenizer, own_tokenizer), config.vocab_size)
    if memory_check:
        check_fits(evaluation_estimate(model, batch=batch_size, length=context), next(model.parameters()).device,
                   doing=f"scoring {batch_size} windows of {context:,} tokens at a time", source=name)
    check_finite_weights(model, source=name)
    scored, size = _scored(model, texts, context=context, stride=stride, batch_size=batch_size, progress=progress)
    return Perplexity.of(scored, size, context=context, stride=stride, batch_size=batch_size, texts=len(paths))


def _scored(model: Transformer, texts: list[TextTokens | _Split], *, context: int, stride: int, batch_size: int,
            progress: Progress | None) -> tuple[Scored, TextSize]:
    nats, tokens, size = 0.0, 0, TextSize(bytes=0, characters=0)
    for text in texts:
        read = _Reported(text, progress)
        one = score_batches(model, batches(read, context=context, stride=stride, size=batch_size),
                            after_batch=read.report)
        read.report(0)
        nats, tokens = nats + one.nats, tokens + one.tokens
        size = TextSize(bytes=size.bytes + text.size.bytes, characters=size.characters + text.size.characters)
    if tokens == 0:
        raise InputError(Problem(path="files", message="no token to score: each text needs at least two tokens",
                                 hint="give more text"))
    if not np.isfinite(nats):
        raise non_finite_logits(model.spec.source or "the model")
    return Scored(nats=nats, tokens=tokens), size


class _Reported:
    """A text's pieces, telling ``progress`` how many more bytes have been scored after each batch."""

    def __init__(self, text: TextTokens | _Split, progress: Progress | None) -> None:
        self.text, self.progress, self.told = text, progress, 0

    def __iter__(self) -> Iterator[list[int] | np.ndarray]:
        return iter(self.text)

    def report(self, _tokens: int) -> None:
        if self.progress is not None and self.text.size.bytes > self.told:
            self.progress(self.text.size.bytes - self.told)
            self.told = self.text.size.bytes


class _Split:
    """A prepared dataset's validation ids, a piece at a time, and the size of the text they decode to."""

    def __init__(self, dataset: PreparedDataset) -> None:
        self.ids, self.tokenizer = dataset.splits["val"], dataset.tokenizer
        self.size = TextSize(bytes=0, characters=0)

    def __iter__(self) -> Iterator[np.ndarray]:
        start = 0
        while start < len(self.ids):
            end, grown = self._piece(start)
            yield np.asarray(self.ids[start:end], dtype=np.int64)  # (end - start,)
            self.size = TextSize(bytes=self.size.bytes + grown.bytes,
                                 characters=self.size.characters + grown.characters)
            start = end

    def _piece(self, start: int) -> tuple[int, TextSize]:
        """Where the piece from ``start`` ends, grown by a few ids while a character is cut in two (a
        byte-level token ends inside it and the decoded text ends in U+FFFD), and that text's size."""
        end = min(start + DECODE_TOKENS, len(self.ids))
        text = self.tokenizer.decode(self.ids[start:end].tolist())
        while text.endswith("\ufffd") and end < min(start + DECODE_TOKENS + 8, len(self.ids)):
            end += 1
            text = self.tokenizer.decode(self.ids[start:end].tolist())
        return end, text_size(text)


def _texts(paths: list[Path], tokenizer: Tokenizer | None, vocab_size: int) -> list[TextTokens | _Split]:
    """Each path as the ids it holds, everything refused first: a bad file, a mismatched tokenizer, no tokenizer."""
    check_text_files([path for path in paths if not path.is_dir()])
    texts: list[TextTokens | _Split] = []
    for path in paths:
        if path.is_dir():
            dataset = PreparedDataset(path)
            _check_unmasked(dataset, path)
            if tokenizer is not None:
                dataset.check_tokenizer(tokenizer, source="the model")
            texts.append(_Split(dataset))
        else:
            texts.append(TextTokens(path, _needed(tokenizer, path)))
        _check_vocabulary(texts[-1].tokenizer, vocab_size, path)
    return texts


def _check_unmasked(dataset: PreparedDataset, path: Path) -> None:
    """Refuse instruction data: scoring its every token would score the prompts, which its loss mask leaves out."""
    if dataset.masked:
        raise DataError(Problem(file=str(path), message="holds prompts and responses with a loss mask, and eval "
                                "scores every token of a text, prompts included",
                                hint="blockspec train reports its validation loss on the responses alone (val_loss, "
                                     "val_bpb); evaluate plain text here"))


def _needed(tokenizer: Tokenizer | None, path: Path) -> Tokenizer:
    if tokenizer is None:
        raise TokenizerError(Problem(file=str(path), message="the model carries no tokenizer to read this text "
                                     "with", hint="give one with {tokenizer} (a tokenizer directory, its "
                                     "tokenizer.json, or a model source that carries one)",
                                     names={"tokenizer": "tokenizer="}))
    return tokenizer


def _check_vocabulary(tokenizer: Tokenizer, vocab_size: int, path: Path) -> None:
    if tokenizer.vocab_size > vocab_size:
        raise TokenizerError(Problem(file=str(path), message=f"its tokenizer, {tokenizer.describe()}, has "
                                     f"{tokenizer.vocab_size:,} tokens, more than the model's vocab_size "
                                     f"{vocab_size:,}", hint="give the tokenizer the model was trained with"))


def _tokenizer(given: Tokenizer | str | os.PathLike[str] | None, own: Tokenizer | None) -> Tokenizer | None:
    """The given tokenizer (a path read as ``--tokenizer`` is), else the source's own, else None."""
    if given is None:
        return own
    if not isinstance(given, (str, os.PathLike)):
        return given
    found = tokenizer_at(given)
    if found is None:  # "char": the text's own characters, which no trained model's vocabulary is
        raise TokenizerError(Problem(path="tokenizer", expected="the tokenizer the model was trained with",
                                     found=f"'{given}' (the characters of the text being read)",
                                     hint="give the training checkpoint or its tokenizer directory"))
    return found


def _model(given: object, device: torch.device | str | None) -> tuple[Transformer, Tokenizer | None, str]:
    """The model, the tokenizer its source carries, and the name errors give it."""
    if isinstance(given, Transformer):
        return given, None, given.spec.source or "the model"
    if isinstance(given, Source):
        source = given if given.has_weights else open_source(given.path, given.registry, with_weights=True)
    elif isinstance(given, (str, os.PathLike)):
        source = open_source(given, with_weights=True)
    else:
        raise InputError(Problem(path="source_or_model", expected="a Transformer, a Source or the path of a "
                                 "checkpoint or a Hugging Face directory", found=type(given).__name__))
    return source.model(device=device), source.tokenizer(), str(source.path)


def _checked_context(context: int | None, model_context: int) -> int:
    if context is None:
        return model_context
    if isinstance(context, bool) or not isinstance(context, int) or not 1 <= context <= model_context:
        raise InputError(Problem(path="context", expected=f"a whole number of tokens from 1 to the model's "
                                 f"context_length, {model_context:,}", found=repr(context)))
    return context


def _checked_stride(stride: int, context: int) -> int:
    if isinstance(stride, bool) or not isinstance(stride, int) or not 1 <= stride <= context:
        raise InputError(Problem(path="stride", expected=f"a whole number of tokens from 1 to the context, "
                                 f"{context:,}", found=repr(stride),
                                 hint="a stride past the context would leave tokens unscored"))
    return stride


def _check_positive(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(Problem(path=name, expected="a whole number >= 1", found=repr(value)))
