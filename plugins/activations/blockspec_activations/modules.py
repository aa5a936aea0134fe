"""Activation modules: thin wrappers over torch.nn.functional, no parameters."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from blockspec.plugin import Activation


class ReLU(Activation):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x)


class GELU(Activation):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate=self.approximate)


class SiLU(Activation):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


class SwiGLU(Activation):
    """(..., 2·d_ff) -> (..., d_ff): the first half gates the second."""

    gated = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = x.chunk(2, dim=-1)  # (..., d_ff) each
        return F.silu(gate) * value


class ClampedSwiGLU(Activation):
    """(..., 2·d_ff) -> (..., d_ff), gpt-oss's: the gate g clamped above at limit and the value u to ±limit
    (the clamps keep its experts finite in low precision), then g·sigmoid(alpha·g)·(u + 1)."""

    gated = True

    def __init__(self, alpha: float = 1.702, limit: float = 7.0) -> None:
        super().__init__()
        self.alpha, self.limit = alpha, limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = x.chunk(2, dim=-1)  # (..., d_ff) each
        gate, value = gate.clamp(max=self.limit), value.clamp(min=-self.limit, max=self.limit)
        return gate * torch.sigmoid(self.alpha * gate) * (value + 1)


class GeGLU(Activation):
    """(..., 2·d_ff) -> (..., d_ff) with a GELU gate."""

    gated = True

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = x.chunk(2, dim=-1)  # (..., d_ff) each
        return F.gelu(gate, approximate=self.approximate) * value
