"""ALiBi: attention scores get -m_h · (i - j), a per-head slope times the distance to the key."""

from __future__ import annotations

import math

import torch

from blockspec.plugin import PositionalEncoding


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """The paper's slopes: 2^(-8h/H) for h = 1..H; other head counts interleave the next power of two's."""
    closest = 2 ** math.floor(math.log2(n_heads))
    slopes = [2.0 ** (-8.0 * h / closest) for h in range(1, closest + 1)]
    if closest < n_heads:
        extra = [2.0 ** (-8.0 * h / (2 * closest)) for h in range(1, 2 * closest + 1)]
        slopes += extra[0::2][: n_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBi(PositionalEncoding):
    """No vectors added or rotated: a linear distance penalty on the scores, any length."""

    biases = True
    tensor_positions = True  # the bias depends on distances only, so one (h, n_q, n_k) serves every row's start

    def __init__(self, n_heads: int) -> None:
        super().__init__(max_positions=None)
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def score_bias(self, n_q: int, n_k: int, start: int | torch.Tensor = 0) -> torch.Tensor:
        """(h, n_q, n_k): query i sits at key position i + n_k - n_q; the bias is slope · (j - i)."""
        device = self.slopes.device
        queries = torch.arange(n_k - n_q, n_k, device=device)
        keys = torch.arange(n_k, device=device)
        distance = (keys[None, :] - queries[:, None]).to(self.slopes.dtype)  # (n_q, n_k)
        return self.slopes[:, None, None] * distance[None]  # (h, n_q, n_k)
