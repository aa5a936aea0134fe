"""Norms the core builds itself: the (1 + w) RMSNorm of Gemma's layers and of Gemma 3's q/k norms."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["OffsetRMSNorm"]


class OffsetRMSNorm(nn.Module):
    """RMSNorm scaling by (1 + weight), weight initialised to 0: Gemma's parameterisation, so its checkpoints
    load as they are stored. ``offset`` tells the conformance kit that the learned scale is 1 + weight."""

    offset: ClassVar[bool] = True

    def __init__(self, d_model: int, *, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(d_model))  # (d,): 0 is the identity scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, eps=self.eps) * (1.0 + self.weight)  # (..., d)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, offset=True"
