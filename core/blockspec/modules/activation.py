"""The activation kind's interface: elementwise (d_ff -> d_ff) or gated (2*d_ff -> d_ff)."""

from __future__ import annotations

from torch import nn


class Activation(nn.Module):
    """Base for FFN activations; ``gated`` tells the FFN to make its up-projection twice as wide."""

    gated: bool = False
