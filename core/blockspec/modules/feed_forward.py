"""The position-wise feed-forward network: up-project, activate, down-project."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import torch
from torch import nn

from blockspec.modules.activation import Activation
from blockspec.modules.taps import tap


class FeedForward(nn.Module):
    """d -> d_ff (2*d_ff for gated activations) -> d_ff -> d, the same for every token."""

    tap_ops: ClassVar[dict[str, str]] = {
        "up": "up(x): d -> {up.out_features}",
        "act": "{act}: FFN hidden",
        "down": "down(h): {down.in_features} -> d",
    }
    # what the spec's [init] draws (assembly/initialisation.py); the activation keeps its own
    init_roles: ClassVar[Mapping[str, str]] = {
        "up.weight": "std", "up.bias": "zero", "down.weight": "residual", "down.bias": "zero",
    }

    def __init__(self, *, d_model: int, d_ff: int, activation: Activation, bias: bool) -> None:
        super().__init__()
        width = 2 * d_ff if getattr(activation, "gated", False) else d_ff
        self.up = nn.Linear(d_model, width, bias=bias)
        self.act = activation
        self.down = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = tap(self, "act", self.act(tap(self, "up", self.up(x))))  # (B, N, d_ff)
        return tap(self, "down", self.down(h))
