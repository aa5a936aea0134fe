"""RoPE feature layouts: "interleaved" pairs features (2i, 2i+1), "half" pairs (i, i + hs/2).

The two are the same model up to a fixed permutation of each q and k head's features
(scores are dot products, so permuting q and k alike changes nothing else). Hugging Face
Llama uses "half"; an "interleaved" model exports by permuting the q and k rows of qkv.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from blockspec.modules.attention import qkv_split_sizes
from blockspec.spec.schema import ModelConfig


def interleaved_to_half(head_dim: int) -> torch.Tensor:
    """perm with half[..., j] = interleaved[..., perm[j]]: evens first, then odds."""
    return torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])


def permute_heads(rows: torch.Tensor, n_heads: int, perm: torch.Tensor) -> torch.Tensor:
    """Reorder the features inside each head of a (n_heads * hs, ...) weight or bias."""
    head_dim = rows.shape[0] // n_heads
    per_head = rows.reshape(n_heads, head_dim, *rows.shape[1:])  # (h, hs, ...)
    return per_head[:, perm].reshape(rows.shape)  # (h * hs, ...)


def permute_qkv(qkv: torch.Tensor, cfg: ModelConfig, perm: torch.Tensor) -> torch.Tensor:
    """The fused q|k|v rows with q's and k's head features permuted; v untouched."""
    sizes = qkv_split_sizes(cfg.n_heads, cfg.kv_heads, cfg.head_dim)
    q, k, v = qkv.split(list(sizes), dim=0)  # (h·hs, ...), (kv·hs, ...), (kv·hs, ...)
    return torch.cat([permute_heads(q, cfg.n_heads, perm), permute_heads(k, cfg.kv_heads, perm), v], dim=0)


def interleaved_state_as_half(state: Mapping[str, torch.Tensor], cfg: ModelConfig, *,
                              rotary_dim: int | None = None) -> dict[str, torch.Tensor]:
    """The weights of an interleaved-RoPE model, rearranged for the same model with half layout.

    Only the first ``rotary_dim`` features of a head rotate (partial RoPE); the rest keep their place. A qk
    norm's scales multiply q and k feature by feature, so they move with the features: a per-head scale
    (head_dim,) by the permutation itself, one over all heads (h·hs,) head by head.
    """
    perm = _rotary_perm(cfg.head_dim, rotary_dim or cfg.head_dim)
    converted = dict(state)
    for name, tensor in state.items():
        if name.endswith((".attn.qkv.weight", ".attn.qkv.bias")):
            converted[name] = permute_qkv(tensor, cfg, perm)
        elif name.endswith((".attn.q_norm.weight", ".attn.k_norm.weight")):
            converted[name] = permute_heads(tensor, tensor.shape[0] // cfg.head_dim, perm)
    return converted


def _rotary_perm(head_dim: int, rotary_dim: int) -> torch.Tensor:
    """interleaved_to_half on the rotated features, identity on the rest."""
    return torch.cat([interleaved_to_half(rotary_dim), torch.arange(rotary_dim, head_dim)])
