"""Multi-head latent attention (DeepSeek V2/V3): keys and values expanded from a cached low-rank latent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import torch
from torch import nn

from blockspec.plugin import CacheLayout, CausalSelfAttention, PositionalEncoding, Start, declare_init, rotate_at, tap


class LatentAttention(CausalSelfAttention):
    """Each token is compressed to a latent c (kv_lora_rank wide, RMS-normalised) and one rotary key k_r
    (head_dim wide, shared by every head); the cache keeps only [c, k_r]. Keys and values of every head are
    expanded from c by ``kv_up``: k = [k_nope, k_r], v. Queries come from x directly (``q_proj``) or through
    their own normalised bottleneck (``q_down``, ``q_latent_norm``, ``q_up``); their last head_dim features
    rotate. The mask, SDPA and the output projection are the core attention's.
    """

    # what the spec's [init] draws; the query projections' roles are the instance's (one of two paths exists)
    init_roles: ClassVar[Mapping[str, str]] = {
        "kv_down.weight": "std", "kv_down.bias": "zero", "kv_up.weight": "std",
        "proj.weight": "residual", "proj.bias": "zero",
    }

    def __init__(self, *, d_model: int, n_heads: int, rope_head_dim: int, nope_head_dim: int, v_head_dim: int,
                 kv_lora_rank: int, q_lora_rank: int | None, bias: bool, dropout: float,
                 latent_norm_eps: float = 1e-6, query_scale: float | None = None) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, n_kv_heads=n_heads, bias=bias, dropout=dropout,
                         head_dim=nope_head_dim + rope_head_dim, query_scale=query_scale, value_head_dim=v_head_dim,
                         fused_qkv=False)
        self.rope_head_dim, self.nope_head_dim, self.kv_lora_rank = rope_head_dim, nope_head_dim, kv_lora_rank
        width = n_heads * self.head_dim
        if q_lora_rank is None:
            self.q_proj = nn.Linear(d_model, width, bias=False)
        else:
            self.q_down = nn.Linear(d_model, q_lora_rank, bias=bias)
            self.q_latent_norm = nn.RMSNorm(q_lora_rank, eps=latent_norm_eps)
            self.q_up = nn.Linear(q_lora_rank, width, bias=False)
        self.kv_down = nn.Linear(d_model, kv_lora_rank + rope_head_dim, bias=bias)
        self.kv_norm = nn.RMSNorm(kv_lora_rank, eps=latent_norm_eps)
        self.kv_up = nn.Linear(kv_lora_rank, n_heads * (nope_head_dim + v_head_dim), bias=False)
        self.cache_layout = CacheLayout(1, kv_lora_rank + rope_head_dim, 0)  # one [c, k_r] row a token, no values
        queries = {"q_proj.weight": "std"} if q_lora_rank is None else \
            {"q_down.weight": "std", "q_down.bias": "zero", "q_up.weight": "std"}
        declare_init(self, {**self.init_roles, **queries})

    def project(self, x: torch.Tensor, positional: PositionalEncoding,
                start: Start = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, N, d) -> q, k (B, h, N, nope + head_dim), v (B, h, N, v_head_dim), as the attention sees them."""
        q, latent, nothing = self.cacheable(x, positional, start)
        return (q, *self.expanded(latent, nothing))

    def cacheable(self, x: torch.Tensor, positional: PositionalEncoding,
                  start: Start = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, N, d) -> the rotated queries (B, h, N, nope + hs_r) and what the cache keeps: [c, k_r] rotated
        (B, 1, N, r + hs_r) in the keys, and no values (B, 1, N, 0)."""
        q_nope, q_rope = self.queries(x).split((self.nope_head_dim, self.rope_head_dim), dim=-1)
        latent, k_rope = self.kv_down(x).split((self.kv_lora_rank, self.rope_head_dim), dim=-1)  # (B, N, r), (.., hs_r)
        k_rope = k_rope[:, None]  # (B, N, hs_r) -> (B, 1, N, hs_r): one rotary key for every head
        if positional.rotates:
            q_rope, k_rope = rotate_at(positional, q_rope, k_rope, start)
        q = tap(self, "q", torch.cat((q_nope, q_rope), dim=-1))  # (B, h, N, nope + hs_r)
        cached = torch.cat((self.kv_norm(latent)[:, None], k_rope), dim=-1)  # (B, 1, N, r + hs_r)
        return q, cached, cached[..., :0]  # the values: none of their own

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, N, d) -> q (B, h, N, nope + hs_r), through the low-rank bottleneck when there is one."""
        batch, n_tokens, _ = x.shape
        q = self.q_proj(x) if hasattr(self, "q_proj") else self.q_up(self.q_latent_norm(self.q_down(x)))
        return q.view(batch, n_tokens, self.n_heads, self.head_dim).transpose(1, 2)  # (B, h, N, nope + hs_r)

    def expanded(self, latent: torch.Tensor, nothing: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[c, k_r] (B, 1, T, r + hs_r), and no values -> k (B, h, T, nope + hs_r) and v (B, h, T, v_head_dim)."""
        batch, _, length, _ = latent.shape
        compressed, k_rope = latent.split((self.kv_lora_rank, self.rope_head_dim), dim=-1)
        kv = self.kv_up(compressed[:, 0]).view(batch, length, self.n_heads, -1).transpose(1, 2)  # (B, h, T, nope + v)
        k_nope, v = kv.split((self.nope_head_dim, self.value_head_dim), dim=-1)
        k = torch.cat((k_nope, k_rope.expand(-1, self.n_heads, -1, -1)), dim=-1)  # (B, h, T, nope + hs_r)
        return tap(self, "k", k), tap(self, "v", v)

    @property
    def tap_ops(self) -> dict[str, str]:
        """What each tap computes, for ``blockspec trace``."""
        ops = super().tap_ops
        ops.update(q="[q_nope, rotated q_rope] of each head, from q_proj(x) or q_up(norm(q_down(x)))",
                   k="[k_nope, k_r]: kv_up(norm(c)) per head beside the one rotated k_r, c the cached latent",
                   v="kv_up(norm(c)): each head's values, from the cached latent")
        return ops
