"""The blocks beyond the classic pre/post-norm ones: parallel, sandwich and output-norm residuals."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from blockspec.plugin import LayerCache, PositionalEncoding, attend, tap


def _dropped(drop: nn.Dropout, x: torch.Tensor) -> torch.Tensor:
    return drop(x) if drop.p else x  # an nn.Dropout(0.0) call still costs microseconds


class ParallelBlock(nn.Module):
    """GPT-J / Falcon / PaLM: x + attn(norm1(x)) + ffn(norm2(x)); one norm for both when ``norm2`` is None."""

    tap_ops: ClassVar[dict[str, str]] = {
        "norm1": "{norm1}(x): attention input norm",
        "attn": "{attn}: whole attention (not traced inside)",
        "norm2": "{norm2}(x): FFN input norm",
        "ffn": "{ffn}: whole FFN (not traced inside)",
        "residual": "x + attn(norm1(x)) + ffn(norm2(x)): both sublayers added at once",
    }

    def __init__(self, *, attn: nn.Module, ffn: nn.Module, norm1: nn.Module, norm2: nn.Module | None,
                 dropout: float) -> None:
        super().__init__()
        self.norm1, self.attn = norm1, attn
        if norm2 is not None:
            self.norm2 = norm2
        self.ffn = ffn
        self.shared_norm = norm2 is None
        if self.shared_norm:  # one norm feeds both sublayers: no norm2 stage to show
            self.tap_ops = {k: v.replace("norm2(x)", "norm1(x)") for k, v in self.tap_ops.items() if k != "norm2"}
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        h = tap(self, "norm1", self.norm1(x))
        a = tap(self, "attn", attend(self.attn, h, positional, start, cache))
        g = h if self.shared_norm else tap(self, "norm2", self.norm2(x))
        f = tap(self, "ffn", self.ffn(g))
        return tap(self, "residual", x + _dropped(self.drop, a) + _dropped(self.drop, f))


class SandwichBlock(nn.Module):
    """Gemma 2/3: x + norm_post(f(norm_pre(x))) for each sublayer, four norms."""

    tap_ops: ClassVar[dict[str, str]] = {
        "norm1": "{norm1}(x): attention input norm",
        "attn": "{attn}: whole attention (not traced inside)",
        "post_attn_norm": "{post_attn_norm}: attention output norm",
        "attn_residual": "x + post_attn_norm(attn(norm1(x))): residual add",
        "norm2": "{norm2}(x): FFN input norm",
        "ffn": "{ffn}: whole FFN (not traced inside)",
        "post_ffn_norm": "{post_ffn_norm}: FFN output norm",
        "ffn_residual": "x + post_ffn_norm(ffn(norm2(x))): residual add",
    }

    def __init__(self, *, attn: nn.Module, ffn: nn.Module, norm1: nn.Module, post_attn_norm: nn.Module,
                 norm2: nn.Module, post_ffn_norm: nn.Module, dropout: float) -> None:
        super().__init__()
        self.norm1, self.attn, self.post_attn_norm = norm1, attn, post_attn_norm
        self.norm2, self.ffn, self.post_ffn_norm = norm2, ffn, post_ffn_norm
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        h = tap(self, "norm1", self.norm1(x))
        a = tap(self, "attn", attend(self.attn, h, positional, start, cache))
        a = tap(self, "post_attn_norm", self.post_attn_norm(a))
        x = tap(self, "attn_residual", x + _dropped(self.drop, a))
        f = tap(self, "ffn", self.ffn(tap(self, "norm2", self.norm2(x))))
        f = tap(self, "post_ffn_norm", self.post_ffn_norm(f))
        return tap(self, "ffn_residual", x + _dropped(self.drop, f))


class OutputNormBlock(nn.Module):
    """OLMo 2: x + norm(f(x)) for each sublayer; the sublayer's input is the raw residual stream."""

    tap_ops: ClassVar[dict[str, str]] = {
        "attn": "{attn}: whole attention (not traced inside)",
        "norm1": "{norm1}: attention output norm",
        "attn_residual": "x + norm1(attn(x)): residual add",
        "ffn": "{ffn}: whole FFN (not traced inside)",
        "norm2": "{norm2}: FFN output norm",
        "ffn_residual": "x + norm2(ffn(x)): residual add",
    }

    def __init__(self, *, attn: nn.Module, ffn: nn.Module, norm1: nn.Module, norm2: nn.Module,
                 dropout: float) -> None:
        super().__init__()
        self.attn, self.norm1, self.ffn, self.norm2 = attn, norm1, ffn, norm2
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        a = tap(self, "attn", attend(self.attn, x, positional, start, cache))
        x = tap(self, "attn_residual", x + _dropped(self.drop, tap(self, "norm1", self.norm1(a))))
        f = tap(self, "ffn", self.ffn(x))
        return tap(self, "ffn_residual", x + _dropped(self.drop, tap(self, "norm2", self.norm2(f))))
