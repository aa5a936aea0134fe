"""Transformer blocks: attention then FFN, each wrapped in a residual connection and a norm."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from blockspec.modules.dropout import dropped
from blockspec.modules.kv_cache import LayerCache
from blockspec.modules.positional import PositionalEncoding
from blockspec.modules.taps import tap


class PreNormBlock(nn.Module):
    """GPT-2 style: x + f(norm(x)); the residual stream itself is never normalised."""

    tap_ops: ClassVar[dict[str, str]] = {
        "norm1": "{norm1}(x): attention input norm",
        "attn": "{attn}: whole attention (not traced inside)",
        "attn_residual": "x + attn(norm1(x)): residual add",
        "norm2": "{norm2}(x): FFN input norm",
        "ffn": "{ffn}: whole FFN (not traced inside)",
        "ffn_residual": "x + ffn(norm2(x)): residual add",
    }

    def __init__(self, *, attn: nn.Module, ffn: nn.Module, norm1: nn.Module, norm2: nn.Module, dropout: float) -> None:
        super().__init__()
        self.norm1, self.attn, self.norm2, self.ffn = norm1, attn, norm2, ffn
        self.drop = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0, cache: LayerCache | None = None
    ) -> torch.Tensor:
        h = tap(self, "norm1", self.norm1(x))
        a = tap(self, "attn", _attend(self.attn, h, positional, start, cache))
        x = tap(self, "attn_residual", x + dropped(self.drop, a))
        f = tap(self, "ffn", self.ffn(tap(self, "norm2", self.norm2(x))))
        return tap(self, "ffn_residual", x + dropped(self.drop, f))


class PostNormBlock(nn.Module):
    """The 2017 paper: norm(x + f(x)) after each sublayer ("add & norm")."""

    tap_ops: ClassVar[dict[str, str]] = {
        "attn": "{attn}: whole attention (not traced inside)",
        "attn_residual": "x + attn(x): residual add",
        "norm1": "{norm1}: add & norm after attention",
        "ffn": "{ffn}: whole FFN (not traced inside)",
        "ffn_residual": "x + ffn(x): residual add",
        "norm2": "{norm2}: add & norm after the FFN",
    }

    def __init__(self, *, attn: nn.Module, ffn: nn.Module, norm1: nn.Module, norm2: nn.Module, dropout: float) -> None:
        super().__init__()
        self.attn, self.norm1, self.ffn, self.norm2 = attn, norm1, ffn, norm2
        self.drop = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0, cache: LayerCache | None = None
    ) -> torch.Tensor:
        a = tap(self, "attn", _attend(self.attn, x, positional, start, cache))
        x = tap(self, "norm1", self.norm1(tap(self, "attn_residual", x + dropped(self.drop, a))))
        f = tap(self, "ffn", self.ffn(x))
        return tap(self, "norm2", self.norm2(tap(self, "ffn_residual", x + dropped(self.drop, f))))


def attend(
    attn: nn.Module, x: torch.Tensor, positional: PositionalEncoding, start: int, cache: LayerCache | None
) -> torch.Tensor:
    """Pass the cache only when decoding with one, so attention modules without a cache argument still work."""
    return attn(x, positional, start) if cache is None else attn(x, positional, start, cache)


_attend = attend
