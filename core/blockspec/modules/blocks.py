"""Transformer blocks: attention then FFN, each wrapped in a residual connection and a norm."""

from __future__ import annotations

import torch
from torch import nn

from blockspec.modules.dropout import dropped
from blockspec.modules.kv_cache import LayerCache
from blockspec.modules.positional import PositionalEncoding


class PreNormBlock(nn.Module):
    """GPT-2 style: x + f(norm(x)); the residual stream itself is never normalised."""

    def __init__(self, *, attn: nn.Module, ffn: nn.Module, norm1: nn.Module, norm2: nn.Module, dropout: float) -> None:
        super().__init__()
        self.norm1, self.attn, self.norm2, self.ffn = norm1, attn, norm2, ffn
        self.drop = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0, cache: LayerCache | None = None
    ) -> torch.Tensor:
        x = x + dropped(self.drop, _attend(self.attn, self.norm1(x), positional, start, cache))
        return x + dropped(self.drop, self.ffn(self.norm2(x)))


class PostNormBlock(nn.Module):
    """The 2017 paper: norm(x + f(x)) after each sublayer ("add & norm")."""

    def __init__(self, *, attn: nn.Module, ffn: nn.Module, norm1: nn.Module, norm2: nn.Module, dropout: float) -> None:
        super().__init__()
        self.attn, self.norm1, self.ffn, self.norm2 = attn, norm1, ffn, norm2
        self.drop = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0, cache: LayerCache | None = None
    ) -> torch.Tensor:
        x = self.norm1(x + dropped(self.drop, _attend(self.attn, x, positional, start, cache)))
        return self.norm2(x + dropped(self.drop, self.ffn(x)))


def _attend(
    attn: nn.Module, x: torch.Tensor, positional: PositionalEncoding, start: int, cache: LayerCache | None
) -> torch.Tensor:
    """Pass the cache only when decoding with one, so attention modules without a cache argument still work."""
    return attn(x, positional, start) if cache is None else attn(x, positional, start, cache)
