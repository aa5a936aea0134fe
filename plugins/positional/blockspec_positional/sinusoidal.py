"""The fixed sinusoidal encoding of "Attention Is All You Need"."""

from __future__ import annotations

import torch

from blockspec.plugin import PositionalEncoding, Start, positions


def frequencies(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """ω_i = 1 / base^(2i/d) for pairs i = 0..ceil(d/2)-1, in float64."""
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    return base ** (-two_i / d_model)


def sinusoidal_table(n_positions: int, d_model: int, *, base: float = 10000.0, start: int = 0) -> torch.Tensor:
    """(N, d) float32: feature 2i = sin(pos·ω_i), feature 2i+1 = cos(pos·ω_i); computed in float64."""
    return sinusoids(torch.arange(start, start + n_positions, dtype=torch.float64), d_model, base=base)


def sinusoids(at: torch.Tensor, d_model: int, *, base: float = 10000.0) -> torch.Tensor:
    """Positions (...,) -> (..., d) float32 sinusoid vectors, computed in float64 on the positions' device."""
    angles = at.double()[..., None] * frequencies(d_model, base).to(at.device)  # (..., ceil(d/2))
    table = torch.empty(*at.shape, d_model, dtype=torch.float64, device=at.device)
    table[..., 0::2] = angles.sin()
    table[..., 1::2] = angles.cos()[..., : d_model // 2]
    return table.to(torch.float32)


class SinusoidalPositions(PositionalEncoding):
    """Adds the sinusoid table; positions past the cached table are computed on demand."""

    adds = True
    tensor_positions = True

    def __init__(self, context_length: int, d_model: int, *, base: float = 10000.0) -> None:
        super().__init__(max_positions=None)
        self.d_model, self.base = d_model, base
        self.register_buffer("table", sinusoidal_table(context_length, d_model, base=base), persistent=False)

    def embed(self, x: torch.Tensor, start: Start = 0) -> torch.Tensor:
        if isinstance(start, torch.Tensor):
            return x + self.gathered(positions(start, x.shape[-2])).to(x.dtype)  # (B, N, d) + (B or 1, N, d)
        return x + self.encodings(x.shape[-2], start).to(x.dtype)  # (B, N, d) + (N, d)

    def gathered(self, at: torch.Tensor) -> torch.Tensor:
        """Positions (N,) or (B, N) -> their vectors (..., d): the table's rows, computed past its end.

        No host sync (a compiled step stays whole): both are formed and the position picks one."""
        last = self.table.shape[0] - 1
        rows = self.table[at.clamp(max=last)]  # (..., d)
        return torch.where((at <= last)[..., None], rows, sinusoids(at, self.d_model, base=self.base))

    def encodings(self, n_positions: int, start: int = 0) -> torch.Tensor:
        """The (N, d) vectors added at positions start..start+N-1."""
        if start + n_positions <= self.table.shape[0]:
            return self.table[start : start + n_positions]
        table = sinusoidal_table(n_positions, self.d_model, base=self.base, start=start)
        return table.to(self.table.device)
