"""Norm modules beyond PyTorch's own."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class OffsetRMSNorm(nn.Module):
    """RMSNorm scaling by (1 + weight), weight initialised to 0: Gemma's parameterisation."""

    def __init__(self, d_model: int, *, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(d_model))  # (d,): 0 is the identity scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, eps=self.eps) * (1.0 + self.weight)  # (..., d)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, offset=True"
