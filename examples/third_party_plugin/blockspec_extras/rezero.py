"""ReZero (Bachlechner et al. 2021): x + α·f(x) per sublayer, no norm, α a learned scalar starting at 0.

At initialisation every layer is the identity, so a deep stack trains without warm-up or norms.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from blockspec.plugin import LayerCache, PositionalEncoding, attend, tap


class ReZeroBlock(nn.Module):
    """x + α_attn·attn(x), then x + α_ffn·ffn(x); the α start at ``alpha_init`` (0: the identity)."""

    tap_ops: ClassVar[dict[str, str]] = {
        "attn": "{attn}: whole attention (not traced inside)",
        "attn_residual": "x + α·attn(x): residual add, α learned",
        "ffn": "{ffn}: whole FFN (not traced inside)",
        "ffn_residual": "x + α·ffn(x): residual add, α learned",
    }

    def __init__(self, *, attn: nn.Module, ffn: nn.Module, alpha_init: float) -> None:
        super().__init__()
        self.attn, self.ffn = attn, ffn
        self.alpha_attn = nn.Parameter(torch.tensor(alpha_init))
        self.alpha_ffn = nn.Parameter(torch.tensor(alpha_init))

    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        a = tap(self, "attn", attend(self.attn, x, positional, start, cache))
        x = tap(self, "attn_residual", x + self.alpha_attn * a)
        f = tap(self, "ffn", self.ffn(x))
        return tap(self, "ffn_residual", x + self.alpha_ffn * f)
