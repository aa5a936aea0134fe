"""Sinusoidal positions whose embed ignores ``start``: every call adds the rows of positions 0..N-1.

All at once it is the 2017 encoding; decoding through a cache, each new token is told it sits at
position 0.
"""

from __future__ import annotations

import torch
from attrs import frozen

from blockspec import BuildContext, hookimpl
from blockspec.modules.positional import PositionalEncoding


@frozen(kw_only=True)
class StartlessConfig:
    """The 2017 sinusoids, always from position 0 (wrong under a cache)."""


def table(n_positions: int, d_model: int) -> torch.Tensor:
    """(N, d): feature 2i = sin(p·ω_i), 2i+1 = cos(p·ω_i), computed in float64."""
    positions = torch.arange(n_positions, dtype=torch.float64)[:, None]
    angles = positions * 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (N, ⌈d/2⌉)
    out = torch.empty(n_positions, d_model, dtype=torch.float64)
    out[:, 0::2], out[:, 1::2] = angles.sin(), angles.cos()[:, : d_model // 2]
    return out.float()


class StartlessSinusoidal(PositionalEncoding):
    adds = True

    def __init__(self, d_model: int) -> None:
        super().__init__(max_positions=None)
        self.d_model = d_model

    def embed(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        return x + table(x.shape[-2], self.d_model).to(x)  # start ignored


def build(config: StartlessConfig, ctx: BuildContext) -> PositionalEncoding:
    return StartlessSinusoidal(ctx.model.d_model)


@hookimpl
def blockspec_register(register) -> None:
    register("positional", "startless_sinusoidal", StartlessConfig, build,
             promises=("additive", "relative", "unbounded"))
