"""Instruction data prepared: JSON lines of a prompt and a response (``instruct``) tokenised as ``prepared``
tokenises text, with a loss mask per split (``MASK_FILES``: one uint8 per token, 1 where that token, as a
target, is scored).

The examples are written one after another, each its prompt's ids, its response's, then the ids that end it
(``prepared.separator``: the end-of-text token); the split then falls between two examples, the boundary nearest
90% of the tokens, so that no example is cut in two. ``meta.json``'s ``loss_mask`` records the mask files and
what each split holds (examples, scored tokens, and the bytes and characters of the responses' text).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from blockspec.checkpoint.atomic import atomic_directory
from blockspec.data import instruct
from blockspec.data.dataset import TRAIN_FRACTION
from blockspec.data.prepared import (LINE_BREAK, MASK_DTYPE, MASK_FILES, PREPARED, SPLIT_FILES, AnyTokenizer,
                                     separator, split_at, token_dtype, write_meta)
from blockspec.data.tokenizer import TokenizerError
from blockspec.outputs.lock import folder_lock
from blockspec.outputs.targets import check_writable_target


def prepare_examples(paths: Sequence[str | Path], tokenizer: AnyTokenizer | None, out: str | Path, *,
                     keys: instruct.Keys = instruct.Keys(), template: instruct.Template = instruct.Template(),
                     overwrite: bool = False, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Tokenise instruction data (``instruct``: JSON lines of a prompt and a response) into ``out``, as ``prepare``
    does, with a loss mask per split (train.mask, val.mask: 1 where a target is scored); returns meta.json.

    Every line is checked first; the split falls between two examples, the one nearest 90% of the tokens.
    """
    target = check_writable_target(out, kind=PREPARED, overwrite=overwrite, inputs=paths)
    with folder_lock(target):
        instruct.check_examples(paths, keys)
        tokenizer = tokenizer or instruct.char_tokenizer(paths, keys, template, LINE_BREAK)
        end = _example_end(tokenizer)
        with atomic_directory(target, overwrite=overwrite) as staging:
            return _write_examples(paths, tokenizer, end, staging, keys, template, progress)


def _example_end(tokenizer: AnyTokenizer) -> list[int]:
    """The ids that end each example (``separator``'s), refused where they are none: examples would run together."""
    between = separator(tokenizer)
    try:
        ids = tokenizer.encode(between)
    except TokenizerError:
        ids = []
    if not ids:
        raise TokenizerError(f"{tokenizer.describe()}: has no end-of-text token and encodes a line break as no "
                             "token, so nothing would end one example before the next; use a tokenizer with an "
                             "end-of-text token (blockspec tokenizer train gives one)")
    return ids


def _write_examples(paths: Sequence[str | Path], tokenizer: AnyTokenizer, end: list[int], folder: Path,
                    keys: instruct.Keys, template: instruct.Template,
                    progress: Callable[[int], None] | None) -> dict[str, Any]:
    """Every example's ids and mask into the train files, then the split at an example boundary, then meta.json."""
    dtype, record = token_dtype(tokenizer.vocab_size), _Record()
    with (folder / SPLIT_FILES["train"]).open("wb") as ids_file, (folder / MASK_FILES["train"]).open("wb") as mask:
        for path in paths:
            for example in instruct.examples(path, keys):
                prompt, response, scored_text = _encoded_example(tokenizer, template, example)
                np.asarray(prompt + response + end, dtype=dtype).tofile(ids_file)
                np.repeat(np.array([0, 1], dtype=MASK_DTYPE), [len(prompt), len(response) + len(end)]).tofile(mask)
                record.add(len(prompt) + len(response) + len(end), len(response) + len(end), scored_text)
                if progress is not None:
                    progress(example.bytes)
    cut = record.cut()
    counts = split_at(folder, SPLIT_FILES, dtype, record.tokens[cut])
    split_at(folder, MASK_FILES, MASK_DTYPE, record.tokens[cut])
    return write_meta(folder, tokenizer, dtype, counts, paths, loss_mask=record.meta(cut, keys, template))


class _Record:
    """After each example: the tokens so far, the scored ones, and the UTF-8 bytes and characters of the scored
    text (what bits per byte divides by); 32 bytes an example."""

    def __init__(self) -> None:
        self.tokens, self.scored, self.bytes, self.characters = (array("q", [0]) for _ in range(4))

    def add(self, tokens: int, scored: int, text: str) -> None:
        for column, value in zip(self._columns, (tokens, scored, len(text.encode("utf-8")), len(text))):
            column.append(column[-1] + value)

    @property
    def _columns(self) -> tuple[array, ...]:
        return self.tokens, self.scored, self.bytes, self.characters

    def cut(self) -> int:
        """The example after which validation starts: the boundary nearest 90% of the tokens, one example
        on each side at least (``check_examples`` made sure of two)."""
        ends = np.frombuffer(self.tokens, dtype=np.int64)[1:-1]  # (examples - 1,)
        return 1 + int(np.argmin(np.abs(ends - self.tokens[-1] * TRAIN_FRACTION)))

    def meta(self, cut: int, keys: instruct.Keys, template: instruct.Template) -> dict[str, Any]:
        """meta.json's ``loss_mask``: its files, and what each split holds."""
        last = len(self.tokens) - 1

        def split(column: array) -> dict[str, int]:
            return {"train": column[cut], "val": column[last] - column[cut]}

        return {"files": MASK_FILES, "dtype": MASK_DTYPE.name, "examples": {"train": cut, "val": last - cut},
                "scored_tokens": split(self.scored), "scored_bytes": split(self.bytes),
                "scored_characters": split(self.characters), "prompt_key": keys.prompt,
                "response_key": keys.response, "template": template.text}


def _encoded_example(tokenizer: AnyTokenizer, template: instruct.Template,
                     example: instruct.Example) -> tuple[list[int], list[int], str]:
    """The ids of the prompt's side and of the response's, encoded apart (the boundary is a token boundary),
    and the response's side as text."""
    prompt, response = template.sides(example.prompt, example.response)
    try:
        return tokenizer.encode(prompt), tokenizer.encode(response), response
    except TokenizerError as error:
        raise TokenizerError(f"{example.file}:{example.line}: {error}") from None
