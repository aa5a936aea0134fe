"""RoPE whose cos/sin past the cached table (context_length rows) are computed for start + 1.

Within the context, and for any call entirely past it, scores still depend on offsets only; but a
token decoded past the context is turned one position too far against keys cached inside it.
"""

from __future__ import annotations

import torch
from attrs import frozen

from blockspec import BuildContext, hookimpl
from blockspec.modules.positional import PositionalEncoding


@frozen(kw_only=True)
class ShiftedRopeConfig:
    """Rotary positions with an off-by-one past the cached table (wrong under a cache)."""


def angles(n_positions: int, head_dim: int, start: int) -> torch.Tensor:
    """(N, hs): pos·θ_i for positions start..start+N-1, each pair's angle twice (half layout)."""
    theta = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    per_pair = torch.arange(start, start + n_positions, dtype=torch.float64)[:, None] * theta[None, :]
    return torch.cat((per_pair, per_pair), dim=-1)


class ShiftedRope(PositionalEncoding):
    rotates = True

    def __init__(self, head_dim: int, context_length: int) -> None:
        super().__init__(max_positions=None)
        self.head_dim = head_dim
        self.register_buffer("cached", angles(context_length, head_dim, 0), persistent=False)  # (T_ctx, hs)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        end = start + q.shape[-2]
        if end <= self.cached.shape[0]:
            theta = self.cached[start:end]
        else:
            theta = angles(q.shape[-2], self.head_dim, start + 1).to(q.device)  # should be start
        cos, sin = theta.cos().to(q.dtype), theta.sin().to(q.dtype)
        return _turn(q, cos, sin), _turn(k, cos, sin)


def _turn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)  # (..., N, hs/2) each
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def build(config: ShiftedRopeConfig, ctx: BuildContext) -> PositionalEncoding:
    return ShiftedRope(ctx.model.head_dim, ctx.model.context_length)


@hookimpl
def blockspec_register(register) -> None:
    register("positional", "shifted_rope", ShiftedRopeConfig, build,
             promises=("rotary", "norm_preserving", "relative", "unbounded"))
