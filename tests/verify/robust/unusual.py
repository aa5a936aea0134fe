"""Correct but unusual components: the kit must pass every promise they declare."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from attrs import frozen
from torch import nn

from blockspec import BuildContext, hookimpl
from blockspec.modules.activation import Activation
from blockspec.modules.positional import PositionalEncoding


@frozen(kw_only=True)
class NoConfig:
    """No fields."""


class LearnedSwish(Activation):
    """x · sigmoid(βx) with one learned β (Swish-β): a parameter of its own, still elementwise."""

    def __init__(self) -> None:
        super().__init__()
        self.beta = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.beta * x)


class PerFeatureSwish(Activation):
    """x · sigmoid(β_j x) with one learned β per feature: elementwise, though not permutation-equivariant."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.beta = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.beta * x)


class XPos(PositionalEncoding):
    """xPos (Sun et al. 2022): rotary turns, q scaled by ζ^(m/s) and k by ζ^(-n/s). Scores depend on m - n only,
    but lengths change: rotary and relative, not norm_preserving."""

    rotates = True

    def __init__(self, head_dim: int, scale_base: float = 2048.0) -> None:  # the paper's 512 overflows float16 by 4096
        super().__init__(max_positions=None)
        half = torch.arange(0, head_dim, 2, dtype=torch.float64)
        self.register_buffer("theta", 10000.0 ** (-half / head_dim), persistent=False)
        self.register_buffer("zeta", (half / head_dim + 0.4) / 1.4, persistent=False)
        self.scale_base = scale_base

    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(start, start + q.shape[-2], dtype=torch.float64, device=q.device)[:, None]
        angles = positions * self.theta.double()[None, :]  # (N, hs/2)
        scale = self.zeta.double()[None, :] ** (positions / self.scale_base)  # (N, hs/2)
        cos, sin = angles.cos(), angles.sin()
        return _turn(q, cos * scale, sin * scale), _turn(k, cos / scale, sin / scale)


def _turn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)  # (..., N, hs/2) each
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class ZeroTableBias(PositionalEncoding):
    """A T5-like bias table that starts at zero, indexed by the offset query - key (clamped): relative."""

    biases = True

    def __init__(self, n_heads: int, buckets: int = 8) -> None:
        super().__init__(max_positions=None)
        self.table = nn.Parameter(torch.zeros(n_heads, buckets))  # (h, buckets)

    def score_bias(self, n_q: int, n_k: int, start: int = 0) -> torch.Tensor:
        queries = torch.arange(n_k - n_q, n_k, device=self.table.device)
        offsets = queries[:, None] - torch.arange(n_k, device=self.table.device)[None, :]  # (n_q, n_k)
        return self.table[:, offsets.clamp(0, self.table.shape[1] - 1)]  # (h, n_q, n_k)


class PlainCausalAttention(nn.Module):
    """Causal attention on SDPA that exposes no project()/weights(): the weights check cannot read it."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0, cache=None) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)  # (B, h, N, hs)
        q, k = positional.rotate(q, k, start)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, h, N, hs)
        return self.out(y.transpose(1, 2).reshape(b, n, d))  # (B, N, d)


@hookimpl
def blockspec_register(register) -> None:
    register("activation", "learned_swish", NoConfig, lambda c, ctx: LearnedSwish(), promises=("elementwise",))
    register("activation", "per_feature_swish", NoConfig, lambda c, ctx: PerFeatureSwish(ctx.model.d_ff),
             promises=("elementwise",))
    register("positional", "xpos", NoConfig, lambda c, ctx: XPos(ctx.model.head_dim),
             promises=("rotary", "relative", "unbounded"))
    register("positional", "zero_table_bias", NoConfig, lambda c, ctx: ZeroTableBias(ctx.model.n_heads),
             promises=("score_bias", "relative", "unbounded"))
    register("attention", "plain_causal", NoConfig,
             lambda c, ctx: PlainCausalAttention(ctx.model.d_model, ctx.model.n_heads), promises=("causal",))
