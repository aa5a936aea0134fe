"""Rotary position embedding (RoFormer): q and k turned by an angle proportional to position."""

from __future__ import annotations

import torch

from blockspec.modules.positional import PositionalEncoding


def rotary_angles(n_positions: int, head_dim: int, *, base: float = 10000.0, start: int = 0) -> torch.Tensor:
    """(N, hs/2) float64 angles pos·θ_i with θ_i = base^(-2i/hs)."""
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    positions = torch.arange(start, start + n_positions, dtype=torch.float64)
    return positions[:, None] * theta[None, :]


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Turn each feature pair of x (..., N, hs) by the angles whose cos/sin are (N, hs/2)."""
    if layout == "half":  # pair i = features (i, i + hs/2), Hugging Face's rotate_half layout
        x1, x2 = x.chunk(2, dim=-1)  # (..., N, hs/2) each
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # pair i = features (2i, 2i+1): (..., N, hs/2) each
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)  # (..., N, hs)


class RotaryPositions(PositionalEncoding):
    """Rotates q and k so that q_m·k_n depends on m - n only; works at any position."""

    rotates = True

    def __init__(self, head_dim: int, context_length: int, *, base: float = 10000.0, layout: str = "half") -> None:
        super().__init__(max_positions=None)
        self.head_dim, self.base, self.layout = head_dim, base, layout
        angles = rotary_angles(context_length, head_dim, base=base)
        self.register_buffer("cos_table", angles.cos().to(torch.float32), persistent=False)
        self.register_buffer("sin_table", angles.sin().to(torch.float32), persistent=False)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.tables(q.shape[-2], start)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        return rotate(q, cos, sin, self.layout), rotate(k, cos, sin, self.layout)

    def tables(self, n_positions: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (N, hs/2) for positions start..start+N-1."""
        end = start + n_positions
        if end <= self.cos_table.shape[0]:
            return self.cos_table[start:end], self.sin_table[start:end]
        angles = rotary_angles(n_positions, self.head_dim, base=self.base, start=start)
        device = self.cos_table.device
        return angles.cos().to(device, torch.float32), angles.sin().to(device, torch.float32)
