"""A "rotary" encoder that turns by pos² · θ: still rotations, but scores depend on absolute position."""

from __future__ import annotations

import torch
from attrs import frozen

from blockspec import BuildContext, hookimpl
from blockspec.modules.positional import PositionalEncoding


@frozen(kw_only=True)
class SquaredAngleConfig:
    """Rotary with angles quadratic in position (wrong)."""


class SquaredAngleRotary(PositionalEncoding):
    rotates = True

    def __init__(self, head_dim: int) -> None:
        super().__init__(max_positions=None)
        self.register_buffer("theta", 10000.0 ** (-torch.arange(0, head_dim, 2) / head_dim), persistent=False)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(start, start + q.shape[-2], dtype=torch.float64, device=q.device)
        angles = (positions[:, None] ** 2) * self.theta[None, :].double()  # (N, hs/2)
        cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
        return self._turn(q, cos, sin), self._turn(k, cos, sin)

    @staticmethod
    def _turn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)  # (..., N, hs/2) each
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def build(config: SquaredAngleConfig, ctx: BuildContext) -> PositionalEncoding:
    return SquaredAngleRotary(ctx.model.head_dim)


@hookimpl
def blockspec_register(register) -> None:
    register("positional", "squared_rope", SquaredAngleConfig, build,
             promises=("rotary", "norm_preserving", "relative", "unbounded"))
