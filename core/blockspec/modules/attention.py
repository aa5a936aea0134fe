"""Causal self-attention: fused qkv, grouped kv heads, PyTorch's SDPA kernel."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from blockspec.modules.kv_cache import LayerCache
from blockspec.modules.positional import PositionalEncoding
from blockspec.modules.taps import tap, tapping


class CausalSelfAttention(nn.Module):
    """Multi-head (or grouped-query) causal self-attention; no loop over heads.

    Taps: q, k, v (before rotation), q_rotated, k_rotated (rotary encoders), score_bias
    (score-bias encoders), weights (only while tapping), heads (weights @ v), out.
    """

    tap_ops: ClassVar[dict[str, str]] = {
        "q": "qkv(x): queries, split into heads",
        "k": "qkv(x): keys, split into kv heads",
        "v": "qkv(x): values, split into kv heads",
        "q_rotated": "{positional}: q rotated by position",
        "k_rotated": "{positional}: k rotated by position",
        "score_bias": "{positional}: score bias",
        "weights": "softmax(q·kᵀ/√hs{score_bias} + mask): weights per head, causally masked",
        "heads": "weights @ v, per head (SDPA)",
        "out": "proj(concat(heads)): attention output",
    }

    def __init__(self, *, d_model: int, n_heads: int, n_kv_heads: int, bias: bool, dropout: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = d_model // n_heads
        self.split_sizes = (d_model, n_kv_heads * self.head_dim, n_kv_heads * self.head_dim)
        self.qkv = nn.Linear(d_model, sum(self.split_sizes), bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = dropout

    def forward(
        self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0, cache: LayerCache | None = None
    ) -> torch.Tensor:
        """x (B, N, d) at positions start..; with a cache, attends to the stored prefix too."""
        q, k, v = self.project(x, positional, start)
        if cache is not None:
            k, v = cache.update(k, v, start)  # (B, kv, start+N, hs) each
        bias = positional.score_bias(q.shape[-2], k.shape[-2], start) if positional.biases else None
        if tapping():
            self.tap_weights(q, k, bias)
        y = tap(self, "heads", self.attend(q, k, v, bias))  # (B, h, N, hs)
        batch, n_tokens = x.shape[:2]
        y = y.transpose(1, 2).reshape(batch, n_tokens, -1)  # (B, N, d)
        return tap(self, "out", self.proj(y))

    def project(
        self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, N, d) -> q (B, h, N, hs), k and v (B, kv, N, hs), rotated if the encoder rotates."""
        batch, n_tokens, _ = x.shape
        q, k, v = self.qkv(x).split(self.split_sizes, dim=-1)
        q = q.view(batch, n_tokens, self.n_heads, self.head_dim).transpose(1, 2)  # (B, h, N, hs)
        k = k.view(batch, n_tokens, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, kv, N, hs)
        v = v.view(batch, n_tokens, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, kv, N, hs)
        q, k, v = tap(self, "q", q), tap(self, "k", k), tap(self, "v", v)
        if positional.rotates:
            q, k = positional.rotate(q, k, start)
            q, k = tap(self, "q_rotated", q), tap(self, "k_rotated", k)
        return q, k, v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """SDPA of q (B, h, N_q, hs) over k, v (B, kv, N_k, hs), the queries being the last N_q positions.

        SDPA's ``is_causal`` aligns the mask top-left, right only when N_q == N_k (no cache).
        One cached query sees every key: no mask. Otherwise, or with a score bias, an explicit
        bottom-right aligned mask.
        """
        dropout = self.dropout if self.training else 0.0
        gqa = self.n_kv_heads != self.n_heads
        n_q, n_k = q.shape[-2], k.shape[-2]
        if bias is None and n_q == n_k:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout, enable_gqa=gqa)
        if bias is None and n_q == 1:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, enable_gqa=gqa)
        mask = causal_mask(n_q, n_k, q.device, q.dtype)
        if bias is not None:
            mask = bias.to(q.dtype) + mask
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, enable_gqa=gqa)

    def tap_weights(self, q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None) -> None:
        """While tapping: the score bias, batched, and the weights of the q and k this forward pass uses."""
        if bias is not None:
            tap(self, "score_bias", batched_bias(bias, q.shape[0]))
        tap(self, "weights", self.weights(q, k, bias))

    def weights(self, q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """The attention probabilities (B, h, N_q, N_k) that ``attend`` uses, made explicit for tracing."""
        if self.n_kv_heads != self.n_heads:
            k = k.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)  # (B, h, N, hs)
        scores = q @ k.transpose(-2, -1) / self.head_dim**0.5  # (B, h, N, N)
        if bias is not None:
            scores = scores + bias
        scores = scores + causal_mask(q.shape[-2], k.shape[-2], q.device, q.dtype)
        return scores.softmax(dim=-1)


def causal_mask(n_q: int, n_k: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """(n_q, n_k) additive mask: 0 where query i may see key j (j <= i + n_k - n_q), -inf elsewhere."""
    allowed = torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril(diagonal=n_k - n_q)
    return torch.zeros(n_q, n_k, dtype=dtype, device=device).masked_fill(~allowed, float("-inf"))


def batched_bias(bias: torch.Tensor, batch: int) -> torch.Tensor:
    """A score bias (h, N_q, N_k) or broadcastable -> (B, h, N_q, N_k) view, so its shape reads like the weights'."""
    bias = bias if bias.dim() == 4 else bias.reshape(1, *([1] * (3 - bias.dim())), *bias.shape)  # (1, h, N_q, N_k)
    return bias.expand(batch, *bias.shape[1:])  # (B, h, N_q, N_k)
