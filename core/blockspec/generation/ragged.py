"""Ragged batches: prompts of different lengths as one left-padded batch, and the grouped fallback.

Left padding puts every row's last prompt token in the same column, so one decoding step serves all
rows; the KV cache carries each row's padding (``KVCache(padding=...)``), from which attention gets each
row's positions and the padding keys to hide. Where no cache can serve (uncached decoding, a learned
table the batch slides past), runs of equal-length prompts are decoded as batches of their own and their
steps interleaved: correct, slower.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from blockspec.errors import InputError, Problem
from blockspec.modules.token_ids import ID_DTYPES

Prompts = Sequence[Sequence[int] | torch.Tensor]  # one 1-D sequence of ids per row, any lengths

__all__ = ["Prompts", "interleaved", "pack", "runs"]


def pack(prompts: Prompts, *, device: torch.device | str | None = None,
         pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts -> ids (B, L) left-padded with ``pad_id`` (L the longest prompt) and each row's padding (B,).

    The pad id is never seen (attention hides it), so any id in the vocabulary serves."""
    rows = [_prompt(prompt, row) for row, prompt in enumerate(_listed(prompts))]
    width = max(len(row) for row in rows)
    ids = torch.tensor([[pad_id] * (width - len(row)) + row for row in rows], dtype=torch.long, device=device)
    padding = torch.tensor([width - len(row) for row in rows], dtype=torch.long, device=device)
    return ids, padding  # (B, L), (B,)


def _listed(prompts: Prompts) -> list[Sequence[int] | torch.Tensor]:
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence) or not prompts:
        raise InputError(Problem(path="ids", expected="a (B, N) tensor of token ids, or a non-empty list of prompts "
                                 "(each a list of ids)", found=_shown(prompts)))
    return list(prompts)


def _prompt(prompt: Sequence[int] | torch.Tensor, row: int) -> list[int]:
    """One prompt as a list of ints; an empty one or one of non-integers is an InputError naming its row."""
    if isinstance(prompt, torch.Tensor):
        if prompt.dtype not in ID_DTYPES or prompt.dim() != 1:
            raise InputError(Problem(path=f"ids[{row}]", expected="a 1-D tensor of integer token ids",
                                     found=f"{prompt.dtype} of shape {tuple(prompt.shape)}"))
        prompt = prompt.tolist()
    if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence) or \
            any(isinstance(i, bool) or not isinstance(i, int) for i in prompt):
        raise InputError(Problem(path=f"ids[{row}]", expected="a list of integer token ids", found=_shown(prompt)))
    if not prompt:
        raise InputError(Problem(path=f"ids[{row}]", expected="a prompt of at least one token", found="no tokens",
                                 hint="drop the empty prompt"))
    return list(prompt)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def runs(padding: torch.Tensor) -> list[range]:
    """The batch's rows as runs of consecutive rows of one length (the grouped fallback's batches).

    Consecutive, so a run keeps its rows' order, and their seeds (``GenerationSettings.row_seeds``) with them."""
    found: list[range] = []
    values = padding.tolist()
    first = 0
    for row in range(1, len(values) + 1):
        if row == len(values) or values[row] != values[first]:
            found.append(range(first, row))
            first = row
    return found


def interleaved(streams: Sequence[tuple[range, Iterator[torch.Tensor]]], batch: int,
                stop_pad: int | None) -> Iterator[torch.Tensor]:
    """Several runs' steps (each (B_run,)) as the whole batch's steps (B,), until every run has ended.

    A run whose rows all stopped ends early; its rows then repeat their pad, as a finished row of one
    batch does: ``stop_pad`` (the first stop id), else the row's last token."""
    last: list[torch.Tensor | None] = [None] * len(streams)
    live = [True] * len(streams)
    while True:
        for index, (_, stream) in enumerate(streams):
            if live[index]:
                tokens = next(stream, None)
                live[index] = tokens is not None
                if tokens is not None:
                    last[index] = tokens
                elif stop_pad is not None and last[index] is not None:
                    last[index] = torch.full_like(last[index], stop_pad)
        if not any(live):
            return
        step = torch.empty(batch, dtype=torch.long, device=_device(last))
        for (rows, _), kept in zip(streams, last):
            step[rows.start:rows.stop] = kept
        yield step


def _device(tensors: Sequence[torch.Tensor | None]) -> torch.device:
    return next(t.device for t in tensors if t is not None)
