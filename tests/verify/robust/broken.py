"""Broken components that fresh float32 modules, permutation checks and 1e-5 tolerances let through."""

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


class GainFirstNorm(nn.Module):
    """LayerNorm with the gain applied before centring (wrong): shift invariant only while the gains are equal."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x * self.weight, x.shape[-1:])


class UpcastNorm(nn.Module):
    """RMSNorm that computes half precision in float32 and never casts back (wrong)."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float() if x.element_size() < 4 else x
        return F.rms_norm(h, h.shape[-1:]) * self.weight.to(h.dtype)


class StickyFloat32Norm(nn.Module):
    """RMSNorm that moves its weight to float32 "for stability" on first use (wrong): the weight no longer
    follows .to(), though the output is cast back."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight.dtype != torch.float32:
            self.weight.data = self.weight.data.float()
        return (F.rms_norm(x.float(), x.shape[-1:]) * self.weight).to(x.dtype)


class ZeroTableAbsolute(PositionalEncoding):
    """A T5-like bias table that starts at zero, indexed by the key's absolute position (wrong)."""

    biases = True

    def __init__(self, n_heads: int, buckets: int = 8) -> None:
        super().__init__(max_positions=None)
        self.table = nn.Parameter(torch.zeros(n_heads, buckets))  # (h, buckets)

    def score_bias(self, n_q: int, n_k: int, start: int = 0) -> torch.Tensor:
        keys = torch.arange(start + n_q - n_k, start + n_q, device=self.table.device)  # absolute positions
        index = keys.clamp(0, self.table.shape[1] - 1)  # should be the offset query - key
        return self.table[:, index][:, None, :].expand(-1, n_q, -1)  # (h, n_q, n_k)


class ClampedALiBi(PositionalEncoding):
    """ALiBi on absolute positions clamped at ``limit`` (wrong past it): distances there shrink to zero."""

    biases = True

    def __init__(self, n_heads: int, limit: int) -> None:
        super().__init__(max_positions=None)
        self.limit = limit
        self.register_buffer("slopes", 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads), persistent=False)

    def score_bias(self, n_q: int, n_k: int, start: int = 0) -> torch.Tensor:
        queries = torch.arange(start + n_k - n_q, start + n_k).clamp(max=self.limit)
        keys = torch.arange(start, start + n_k).clamp(max=self.limit)
        distance = (keys[None, :] - queries[:, None]).to(self.slopes)  # (n_q, n_k)
        return self.slopes[:, None, None] * distance[None]  # (h, n_q, n_k)


class HalfPositionRope(PositionalEncoding):
    """Rotary with its positions in the input's dtype (wrong): bfloat16 rounds position 1000 to a multiple of 8."""

    rotates = True

    def __init__(self, head_dim: int) -> None:
        super().__init__(max_positions=None)
        self.register_buffer("theta", 10000.0 ** (-torch.arange(0, head_dim, 2) / head_dim), persistent=False)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(start, start + q.shape[-2], device=q.device).to(q.dtype)
        angles = positions[:, None] * self.theta[None, :].to(q.dtype)  # (N, hs/2)
        cos, sin = angles.cos(), angles.sin()
        return _turn(q, cos, sin), _turn(k, cos, sin)


def _turn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)  # (..., N, hs/2) each
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class SoftmaxGate(Activation):
    """x · softmax(x) over the features (wrong for "elementwise"): symmetric, so it commutes with permutations."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.softmax(x, dim=-1)


class TokenNormGELU(Activation):
    """GELU of x over each token's RMS (wrong for "elementwise"): a per-token normalisation inside."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(F.rms_norm(x, x.shape[-1:]))


class WeakLeakSwiGLU(Activation):
    """SwiGLU plus 1e-5 of the mean over all tokens (wrong): the future leaks in, weakly."""

    gated = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = x.chunk(2, dim=-1)  # (..., d_ff) each
        out = F.silu(gate) * value
        return out + 1e-5 * out.mean(dim=-2, keepdim=True)  # (B, N, d_ff) + (B, 1, d_ff)


class WeakLeakHead(nn.Module):
    """An lm head that sees 1e-5 of the sequence mean (wrong): logits at i leak tokens after i, weakly."""

    def __init__(self, d_model: int, vocab_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x + 1e-5 * x.mean(dim=1, keepdim=True))  # (B, N, d) + (B, 1, d)


def _d(ctx: BuildContext) -> int:
    return ctx.model.d_model


def _heads(ctx: BuildContext) -> int:
    return ctx.model.n_heads


@hookimpl
def blockspec_register(register) -> None:
    register("norm", "gain_first", NoConfig, lambda c, ctx: GainFirstNorm(_d(ctx)),
             promises=("scale_invariant", "shift_invariant"))
    register("norm", "upcast", NoConfig, lambda c, ctx: UpcastNorm(_d(ctx)), promises=("scale_invariant",))
    register("norm", "sticky_float32", NoConfig, lambda c, ctx: StickyFloat32Norm(_d(ctx)),
             promises=("scale_invariant",))
    register("positional", "zero_table_absolute", NoConfig, lambda c, ctx: ZeroTableAbsolute(_heads(ctx)),
             promises=("score_bias", "relative", "unbounded"))
    register("positional", "clamped_alibi_64", NoConfig, lambda c, ctx: ClampedALiBi(_heads(ctx), 64),
             promises=("score_bias", "relative", "unbounded"))
    register("positional", "clamped_alibi_32", NoConfig, lambda c, ctx: ClampedALiBi(_heads(ctx), 32),
             promises=("score_bias", "relative", "unbounded"))
    register("positional", "half_position_rope", NoConfig, lambda c, ctx: HalfPositionRope(ctx.model.head_dim),
             promises=("rotary", "norm_preserving", "relative", "unbounded"))
    register("activation", "softmax_gate", NoConfig, lambda c, ctx: SoftmaxGate(), promises=("elementwise",))
    register("activation", "token_norm_gelu", NoConfig, lambda c, ctx: TokenNormGELU(), promises=("elementwise",))
    register("activation", "weak_leak_swiglu", NoConfig, lambda c, ctx: WeakLeakSwiGLU(), promises=("gated",))
    register("head", "weak_leak", NoConfig, lambda c, ctx: WeakLeakHead(_d(ctx), ctx.model.vocab_size),
             promises=("lm",))
