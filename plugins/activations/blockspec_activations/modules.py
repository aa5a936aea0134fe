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


class GeGLU(Activation):
    """(..., 2·d_ff) -> (..., d_ff) with a GELU gate."""

    gated = True

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = x.chunk(2, dim=-1)  # (..., d_ff) each
        return F.gelu(gate, approximate=self.approximate) * value
