"""Residual and embedding dropout that costs nothing when it is off."""

from __future__ import annotations

import torch
from torch import nn


def dropped(drop: nn.Dropout, x: torch.Tensor) -> torch.Tensor:
    """``drop(x)``, skipping the module call when p == 0: an nn.Dropout(0.0) call still costs ~3 µs on CPU."""
    return drop(x) if drop.p else x
