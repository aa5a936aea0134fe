"""ScaleNorm: one learned length for every token vector."""

from __future__ import annotations

import math

import torch
from torch import nn


class ScaleNorm(nn.Module):
    """g · x / max(||x||, eps); g starts at sqrt(d), so a fresh norm gives root mean square 1."""

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.g = nn.Parameter(torch.tensor(math.sqrt(d_model)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.norm(dim=-1, keepdim=True).clamp_min(self.eps)  # (..., 1)
        return self.g * x / length
