"""The positional kind's interface: one base serves additive, rotary and score-bias encoders."""

from __future__ import annotations

import torch
from torch import nn

from blockspec.errors import ContextLengthError


class PositionalEncoding(nn.Module):
    """Base for every positional component; each hook is the identity unless overridden.

    The flags let the model skip hooks an encoder does not use, so the forward
    pass has no per-call dispatch for unused ones.
    """

    adds: bool = False  # embed() adds a position signal to the embeddings
    rotates: bool = False  # rotate() turns q and k inside attention
    biases: bool = False  # score_bias() adds to the attention scores

    def __init__(self, max_positions: int | None = None) -> None:
        super().__init__()
        self.max_positions = max_positions  # None: any position works

    def check_length(self, end: int) -> None:
        """Raise before any kernel runs if position ``end - 1`` is out of reach."""
        if self.max_positions is not None and end > self.max_positions:
            raise ContextLengthError(
                f"positions up to {end - 1} requested, but this {type(self).__name__} "
                f"holds positions 0..{self.max_positions - 1} (context_length = {self.max_positions}); "
                "use a shorter input, or sinusoidal/rope positions, which work at any length"
            )

    def embed(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """(B, N, d) -> (B, N, d), positions start..start+N-1."""
        return x

    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """q (B, h, N, hs) and k (B, kv, N, hs) at positions start..start+N-1, each turned as at that position
        alone: the KV cache keeps rotated keys, so rows must not depend on N or on where a call starts."""
        return q, k

    def score_bias(self, n_q: int, n_k: int, start: int = 0) -> torch.Tensor | None:
        """An additive (h, n_q, n_k) or broadcastable bias to the attention scores.

        Queries at positions start..start+n_q-1; keys end where they end, at start+n_q-n_k..start+n_q-1
        (n_k = n_q without a cache, start + n_q with one): the slice of ``score_bias(T, T, 0)``, T = start + n_q.
        """
        return None
