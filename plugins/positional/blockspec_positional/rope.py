"""Rotary position embedding (RoFormer): q and k turned by an angle proportional to position."""

from __future__ import annotations

import torch

from blockspec.plugin import PositionalEncoding


def rotary_angles(n_positions: int, head_dim: int, *, base: float = 10000.0, start: int = 0) -> torch.Tensor:
    """(N, hs/2) float64 angles pos·θ_i with θ_i = base^(-2i/hs)."""
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    positions = torch.arange(start, start + n_positions, dtype=torch.float64)
    return positions[:, None] * theta[None, :]


def full_width(per_pair: torch.Tensor, layout: str) -> torch.Tensor:
    """(N, hs/2) values, one per feature pair -> (N, hs), one per feature, in the layout's pairing."""
    if layout == "half":  # pair i = features (i, i + hs/2), Hugging Face's rotate_half layout
        return torch.cat((per_pair, per_pair), dim=-1)  # (N, hs)
    return per_pair.repeat_interleave(2, dim=-1)  # pair i = features (2i, 2i+1): (N, hs)


def quarter_turn(x: torch.Tensor, layout: str) -> torch.Tensor:
    """Each feature pair (a, b) of x (..., N, hs) -> (-b, a): what the sine term multiplies."""
    if layout == "half":
        x1, x2 = x.chunk(2, dim=-1)  # (..., N, hs/2) each
        return torch.cat((-x2, x1), dim=-1)  # (..., N, hs)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., N, hs/2) each
    return torch.stack((-x2, x1), dim=-1).flatten(-2)  # (..., N, hs)


def turn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """x (..., N, hs) turned by full-width cos/sin (N, hs).

    x·cos leads, so the result keeps x's memory layout: q and k arrive as transposed
    views of the qkv projection, and SDPA's output then goes back to (B, N, d) without a copy.
    """
    return x * cos + quarter_turn(x, layout) * sin


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Turn each feature pair of x (..., N, hs) by the angles whose cos/sin are (N, hs/2)."""
    return turn(x, full_width(cos, layout), full_width(sin, layout), layout)


def rotary_width(head_dim: int, fraction: float) -> int:
    """How many features of each head rotate: fraction·head_dim rounded down to an even number, at least 2."""
    if fraction >= 1.0:
        return head_dim
    return max(2, 2 * int(fraction * head_dim / 2))


class RotaryPositions(PositionalEncoding):
    """Rotates q and k so that q_m·k_n depends on m - n only; works at any position."""

    rotates = True

    def __init__(self, head_dim: int, context_length: int, *, base: float = 10000.0, layout: str = "half",
                 fraction: float = 1.0) -> None:
        super().__init__(max_positions=None)
        self.head_dim, self.base, self.layout = head_dim, base, layout
        self.rotary_dim = rotary_width(head_dim, fraction)  # the first rotary_dim features of each head turn
        cos, sin = self._full_tables(context_length)
        self.register_buffer("cos_full", cos, persistent=False)  # (context_length, rd)
        self.register_buffer("sin_full", sin, persistent=False)  # (context_length, rd)

    def _full_tables(self, n_positions: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """float32 cos and sin (N, rd), computed in float64."""
        angles = full_width(rotary_angles(n_positions, self.rotary_dim, base=self.base, start=start), self.layout)
        return angles.cos().to(torch.float32), angles.sin().to(torch.float32)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.full_tables(q.shape[-2], start)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        if self.rotary_dim == self.head_dim:
            return turn(q, cos, sin, self.layout), turn(k, cos, sin, self.layout)
        return self._turn_part(q, cos, sin), self._turn_part(k, cos, sin)

    def _turn_part(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Partial rotation (GPT-NeoX, Phi): the first rotary_dim features of x (..., N, hs) turn, the rest pass."""
        turned, kept = x[..., :self.rotary_dim], x[..., self.rotary_dim:]
        return torch.cat((turn(turned, cos, sin, self.layout), kept), dim=-1)  # (..., N, hs)

    def full_tables(self, n_positions: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (N, rd) for positions start..start+N-1; past the cached table, computed on demand."""
        end = start + n_positions
        if end <= self.cos_full.shape[0]:
            return self.cos_full[start:end], self.sin_full[start:end]
        cos, sin = self._full_tables(n_positions, start)
        return cos.to(self.cos_full.device), sin.to(self.sin_full.device)

    def tables(self, n_positions: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (N, rd/2), one per rotated feature pair, for positions start..start+N-1."""
        cos, sin = self.full_tables(n_positions, start)
        pairs = slice(0, self.rotary_dim // 2) if self.layout == "half" else slice(0, None, 2)
        return cos[:, pairs], sin[:, pairs]
