"""A lean, hand-written decoder-only transformer: the peer blockspec must match.

Written plainly in one file, the way nanoGPT is: fused qkv, PyTorch's SDPA,
Pre-LN blocks, learned or rotary positions, GELU or SwiGLU, a tied or untied
head, grouped-query attention. Module names follow blockspec's layout, so a
blockspec model's ``state_dict()`` loads here as it is and both run on the
same weights. Nothing here knows about specs or registries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Config:
    vocab_size: int
    context_length: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    bias: bool = True
    positional: str = "learned"  # "learned" or "rope"
    norm: str = "layernorm"  # "layernorm" or "rmsnorm"
    activation: str = "gelu_tanh"  # "gelu_tanh", "gelu" or "swiglu"
    tied: bool = True
    eps: float = 1e-5
    rope_base: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def make_norm(cfg: Config) -> nn.Module:
    if cfg.norm == "rmsnorm":
        return nn.RMSNorm(cfg.d_model, eps=cfg.eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.eps)


class Rotary(nn.Module):
    """Full-width cos/sin tables (N, hs) and rotate_half, as Hugging Face Llama does it."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        theta = cfg.rope_base ** (-torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim)
        angles = torch.arange(cfg.context_length, dtype=torch.float64)[:, None] * theta[None, :]  # (N, hs/2)
        angles = torch.cat((angles, angles), dim=-1)  # (N, hs)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-2]
        x1, x2 = x.chunk(2, dim=-1)  # (B, h, N, hs/2) each
        rotated = torch.cat((-x2, x1), dim=-1)  # (B, h, N, hs)
        return x * self.cos[:n] + rotated * self.sin[:n]


class Attention(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        kv_width = cfg.n_kv_heads * cfg.head_dim
        self.split_sizes = (cfg.d_model, kv_width, kv_width)
        self.qkv = nn.Linear(cfg.d_model, cfg.d_model + 2 * kv_width, bias=cfg.bias)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor, rotary: Rotary | None) -> torch.Tensor:
        B, N, _ = x.shape
        q, k, v = self.qkv(x).split(self.split_sizes, dim=-1)
        q = q.view(B, N, self.n_heads, self.head_dim).transpose(1, 2)  # (B, h, N, hs)
        k = k.view(B, N, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, kv, N, hs)
        v = v.view(B, N, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, kv, N, hs)
        if rotary is not None:
            q, k = rotary(q), rotary(k)
        gqa = self.n_kv_heads != self.n_heads  # SDPA shares each kv head among n_heads / n_kv_heads queries
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)  # (B, h, N, hs)
        y = y.transpose(1, 2).reshape(B, N, -1)  # (B, N, d)
        return self.proj(y)


class FeedForward(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.gated = cfg.activation == "swiglu"
        self.approximate = "tanh" if cfg.activation == "gelu_tanh" else "none"
        self.up = nn.Linear(cfg.d_model, cfg.d_ff * (2 if self.gated else 1), bias=cfg.bias)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        if self.gated:
            gate, value = h.chunk(2, dim=-1)  # (B, N, d_ff) each
            h = F.silu(gate) * value
        else:
            h = F.gelu(h, approximate=self.approximate)
        return self.down(h)


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.norm1, self.attn = make_norm(cfg), Attention(cfg)
        self.norm2, self.ffn = make_norm(cfg), FeedForward(cfg)

    def forward(self, x: torch.Tensor, rotary: Rotary | None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), rotary)
        return x + self.ffn(self.norm2(x))


class LearnedPositions(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.table = nn.Embedding(cfg.context_length, cfg.d_model)


class Head(nn.Module):
    def __init__(self, weight: nn.Parameter) -> None:
        super().__init__()
        self.weight = weight


class Reference(nn.Module):
    """ids (B, N) -> logits (B, N, vocab)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.positional = LearnedPositions(cfg) if cfg.positional == "learned" else Rotary(cfg)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.final_norm = make_norm(cfg)
        weight = self.embedding.weight if cfg.tied else nn.Parameter(torch.empty(cfg.vocab_size, cfg.d_model))
        self.head = Head(weight)
        self.init_weights()

    def init_weights(self) -> None:
        """GPT-2's: N(0, 0.02), zero biases, residual projections scaled by 1/sqrt(2L)."""
        residual_std = 0.02 / math.sqrt(2 * self.cfg.n_layers)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = residual_std if name.endswith(("attn.proj.weight", "ffn.down.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embedding(ids)  # (B, N, d)
        rotary = self.positional if self.cfg.positional == "rope" else None
        if rotary is None:
            x = x + self.positional.table.weight[: ids.shape[1]]  # (B, N, d) + (N, d)
        for block in self.blocks:
            x = block(x, rotary)
        return F.linear(self.final_norm(x), self.head.weight)  # (B, N, vocab)
