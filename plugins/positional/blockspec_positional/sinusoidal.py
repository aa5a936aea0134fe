"""The fixed sinusoidal encoding of "Attention Is All You Need"."""

from __future__ import annotations

import torch

from blockspec.plugin import PositionalEncoding


def frequencies(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """ω_i = 1 / base^(2i/d) for pairs i = 0..ceil(d/2)-1, in float64."""
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    return base ** (-two_i / d_model)


def sinusoidal_table(n_positions: int, d_model: int, *, base: float = 10000.0, start: int = 0) -> torch.Tensor:
    """(N, d) float32: feature 2i = sin(pos·ω_i), feature 2i+1 = cos(pos·ω_i); computed in float64."""
    positions = torch.arange(start, start + n_positions, dtype=torch.float64)
    angles = positions[:, None] * frequencies(d_model, base)[None, :]  # (N, ceil(d/2))
    table = torch.empty(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = angles.sin()
    table[:, 1::2] = angles.cos()[:, : d_model // 2]
    return table.to(torch.float32)


class SinusoidalPositions(PositionalEncoding):
    """Adds the sinusoid table; positions past the cached table are computed on demand."""

    adds = True

    def __init__(self, context_length: int, d_model: int, *, base: float = 10000.0) -> None:
        super().__init__(max_positions=None)
        self.d_model, self.base = d_model, base
        self.register_buffer("table", sinusoidal_table(context_length, d_model, base=base), persistent=False)

    def embed(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        return x + self.encodings(x.shape[-2], start).to(x.dtype)  # (B, N, d) + (N, d)

    def encodings(self, n_positions: int, start: int = 0) -> torch.Tensor:
        """The (N, d) vectors added at positions start..start+N-1."""
        if start + n_positions <= self.table.shape[0]:
            return self.table[start : start + n_positions]
        table = sinusoidal_table(n_positions, self.d_model, base=self.base, start=start)
        return table.to(self.table.device)
