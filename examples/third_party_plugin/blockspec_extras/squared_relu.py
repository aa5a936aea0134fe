"""Squared ReLU, Primer's FFN activation."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from blockspec.plugin import Activation


class SquaredReLU(Activation):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x).square()
