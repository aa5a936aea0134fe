"""A learned absolute position table (GPT-2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import torch
from torch import nn

from blockspec.plugin import PositionalEncoding, Start, positions


class LearnedPositions(PositionalEncoding):
    """Row p of a (context_length, d) table is added to the token at position p."""

    adds = True
    tensor_positions = True
    init_roles: ClassVar[Mapping[str, str]] = {"table.weight": "std"}  # drawn by the spec's [init], as GPT-2's

    def __init__(self, context_length: int, d_model: int) -> None:
        super().__init__(max_positions=context_length)
        self.table = nn.Embedding(context_length, d_model)

    def embed(self, x: torch.Tensor, start: Start = 0) -> torch.Tensor:
        if isinstance(start, torch.Tensor):  # (N, d) or (B, N, d) rows gathered at each row's positions
            return x + self.table.weight[positions(start, x.shape[-2])]  # (B, N, d) + (B or 1, N, d)
        return x + self.table.weight[start : start + x.shape[-2]]  # (B, N, d) + (N, d)

    def encodings(self, n_positions: int, start: int = 0) -> torch.Tensor:
        """The (N, d) vectors added at positions start..start+N-1."""
        self.check_length(start + n_positions)
        return self.table.weight[start : start + n_positions]
