"""The position-wise feed-forward network: up-project, activate, down-project."""

from __future__ import annotations

import torch
from torch import nn

from blockspec.modules.activation import Activation


class FeedForward(nn.Module):
    """d -> d_ff (2*d_ff for gated activations) -> d_ff -> d, the same for every token."""

    def __init__(self, *, d_model: int, d_ff: int, activation: Activation, bias: bool) -> None:
        super().__init__()
        width = 2 * d_ff if getattr(activation, "gated", False) else d_ff
        self.up = nn.Linear(d_model, width, bias=bias)
        self.act = activation
        self.down = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))
