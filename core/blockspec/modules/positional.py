"""The positional kind's interface: one base serves additive, rotary and score-bias encoders."""

from __future__ import annotations

import torch
from torch import nn

from blockspec.errors import ContextLengthError

Start = int | torch.Tensor  # an int, a 0-d long tensor (every row) or (B, 1) long (each row's first position)


class PositionalEncoding(nn.Module):
    """Base for every positional component; each hook is the identity unless overridden.

    The flags let the model skip hooks an encoder does not use, so the forward
    pass has no per-call dispatch for unused ones.
    """

    adds: bool = False  # embed() adds a position signal to the embeddings
    rotates: bool = False  # rotate() turns q and k inside attention
    biases: bool = False  # score_bias() adds to the attention scores
    # The hooks take a tensor ``start`` too (0-d or (B, 1), positions below 0 read as 0), vectorised;
    # without it the helpers below call them row by row with int starts (correct, slower).
    tensor_positions: bool = False

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
        """An additive (h, n_q, n_k) or broadcastable bias to the attention scores; (B or 1, h or 1, n_q, n_k)
        for a (B, 1) tensor ``start``.

        Queries at positions start..start+n_q-1; keys end where they end, at start+n_q-n_k..start+n_q-1
        (n_k = n_q without a cache, start + n_q with one): the slice of ``score_bias(T, T, 0)``, T = start + n_q.
        """
        return None


def positions(start: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """A tensor start (0-d or (B, 1)) -> the positions (N,) or (B, N) of a call's N tokens; left padding's
    negative positions read as 0 (those tokens are masked)."""
    return (start + torch.arange(n_tokens, device=start.device)).clamp(min=0)  # (N,) or (B, N)


def _row_starts(start: torch.Tensor) -> list[int]:
    """(B, 1) or 0-d starts as ints, for an encoder whose hooks take int starts only (one host sync)."""
    return [int(value) for value in start.reshape(-1).tolist()]


def _pads(start: int, n_tokens: int) -> int:
    """How many of a call's first tokens sit at negative positions (left padding)."""
    return min(max(-start, 0), n_tokens)


def embed_at(positional: PositionalEncoding, x: torch.Tensor, start: Start) -> torch.Tensor:
    """``positional.embed(x, start)`` (B, N, d) for any start; the one way the core calls the hook."""
    if isinstance(start, int) or positional.tensor_positions:
        return positional.embed(x, start)  # type: ignore[arg-type]  # the flag says it takes tensors
    starts = _row_starts(start)
    if start.dim() == 0:  # one start for every row
        return _embed_row(positional, x, starts[0])
    rows = [_embed_row(positional, x[r:r + 1], s) for r, s in enumerate(starts)]  # each (1, N, d)
    return torch.cat(rows, dim=0)  # B x (1, N, d) -> (B, N, d)


def _embed_row(positional: PositionalEncoding, x: torch.Tensor, start: int) -> torch.Tensor:
    """Rows sharing an int start; tokens at negative positions (padding) pass unchanged."""
    pads = _pads(start, x.shape[-2])
    if pads == 0:
        return positional.embed(x, start)
    if pads == x.shape[-2]:
        return x
    return torch.cat((x[:, :pads], positional.embed(x[:, pads:], max(start, 0))), dim=1)  # (1, N, d)


def rotate_at(positional: PositionalEncoding, q: torch.Tensor, k: torch.Tensor,
              start: Start) -> tuple[torch.Tensor, torch.Tensor]:
    """``positional.rotate(q, k, start)`` for any start: q (B, h, N, hs), k (B, kv, N, hs)."""
    if isinstance(start, int) or positional.tensor_positions:
        return positional.rotate(q, k, start)  # type: ignore[arg-type]
    starts = _row_starts(start)
    if start.dim() == 0:  # one start for every row
        return _rotate_row(positional, q, k, starts[0])
    rows = [_rotate_row(positional, q[r:r + 1], k[r:r + 1], s) for r, s in enumerate(starts)]
    return torch.cat([r[0] for r in rows]), torch.cat([r[1] for r in rows])  # B x (1, h, N, hs) -> (B, h, N, hs)


def _rotate_row(positional: PositionalEncoding, q: torch.Tensor, k: torch.Tensor,
                start: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows sharing an int start; tokens at negative positions (padding) stay unturned."""
    pads = _pads(start, q.shape[-2])
    if pads == 0:
        return positional.rotate(q, k, start)
    if pads == q.shape[-2]:
        return q, k
    turned_q, turned_k = positional.rotate(q[..., pads:, :], k[..., pads:, :], max(start, 0))
    return (torch.cat((q[..., :pads, :], turned_q), dim=-2),  # (1, h, N, hs)
            torch.cat((k[..., :pads, :], turned_k), dim=-2))  # (1, kv, N, hs)


def score_bias_at(positional: PositionalEncoding, n_q: int, n_k: int, start: Start) -> torch.Tensor | None:
    """``positional.score_bias(n_q, n_k, start)`` for any start; row by row: (B, h or 1, n_q, n_k)."""
    if isinstance(start, int) or positional.tensor_positions:
        return positional.score_bias(n_q, n_k, start)  # type: ignore[arg-type]
    starts = _row_starts(start)
    if start.dim() == 0 and starts[0] >= 0:
        return positional.score_bias(n_q, n_k, starts[0])
    rows = [_bias_row(positional, n_q, n_k, s) for s in starts]
    found = [row for row in rows if row is not None]
    if not found:
        return None
    heads = max(row.shape[0] for row in found)
    blank = found[0].new_zeros(heads, n_q, n_k)  # a row the hook left unbiased (or all padding)
    return torch.stack([blank if row is None else row.expand(heads, n_q, n_k) for row in rows])  # (B, h, q, k)


def _bias_row(positional: PositionalEncoding, n_q: int, n_k: int, start: int) -> torch.Tensor | None:
    """One row's bias (h or 1, n_q, n_k) at an int start: the hook's for the queries and keys at positions
    >= 0, bottom-right; 0 where a query or a key is padding (masked anyway)."""
    pads_q = _pads(start, n_q)
    real_q, real_k = n_q - pads_q, min(n_k, max(start + n_q, 0))  # keys end at position start + n_q - 1
    if real_q == 0:
        return None
    bias = positional.score_bias(real_q, real_k, max(start, 0))
    if bias is None:
        return None
    bias = bias.reshape(*([1] * (3 - bias.dim())), *bias.shape).expand(-1, real_q, real_k)  # (h or 1, q, k)
    full = bias.new_zeros(bias.shape[0], n_q, n_k)
    full[:, pads_q:, n_k - real_k:] = bias
    return full
