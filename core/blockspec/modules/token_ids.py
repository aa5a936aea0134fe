"""What counts as token ids, asked once: by the model's forward and by generation before its first step."""

from __future__ import annotations

import torch

from blockspec.errors import InputError, Problem

ID_DTYPES = (torch.long, torch.int32)  # what nn.Embedding indexes with

__all__ = ["ID_DTYPES", "check_token_ids"]


def check_token_ids(ids: object, *, min_length: int = 0) -> None:
    """A (B, N) tensor of integer ids with N >= ``min_length``: anything else is an InputError naming what came.

    Float and bool ids are refused, never cast: a cast would silently truncate 2.7 to 2."""
    if not isinstance(ids, torch.Tensor):
        raise InputError(Problem(path="ids", expected="a tensor of token ids (B, N)", found=type(ids).__name__,
                                 hint="torch.tensor(ids)"))
    if ids.dtype not in ID_DTYPES:
        raise InputError(Problem(path="ids", expected="integer token ids (torch.long or torch.int32)",
                                 found=str(ids.dtype), hint="ids.long(), if they hold whole numbers"))
    if ids.dim() != 2:
        hint = "add a batch dimension: ids[None]" if ids.dim() == 1 else None
        raise InputError(Problem(path="ids", expected="token ids of shape (B, N)", found=f"shape {tuple(ids.shape)}",
                                 hint=hint))
    if ids.shape[1] < min_length:
        raise InputError(Problem(path="ids", expected=f"token ids of shape (B, N) with N >= {min_length}",
                                 found=f"shape {tuple(ids.shape)}"))
