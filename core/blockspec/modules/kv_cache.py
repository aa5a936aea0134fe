"""A key/value cache for incremental decoding: each layer's k and v, preallocated, written in place.

Generation appends one token at a time; without a cache every step would recompute
k and v for the whole prefix. The cache holds them in (B, kv, T_max, hs) tensors so a
step costs one new row per layer and no allocation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from blockspec.errors import ContextLengthError

if TYPE_CHECKING:
    from blockspec.modules.transformer import Transformer


class LayerCache:
    """One layer's keys and values, (B, kv, T_max, hs) each."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.keys = keys
        self.values = values

    def update(self, k: torch.Tensor, v: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (B, kv, N, hs) at positions start..start+N-1; return all keys/values up to there."""
        end = start + k.shape[-2]
        self.keys[:, :, start:end] = k
        self.values[:, :, start:end] = v
        return self.keys[:, :, :end], self.values[:, :, :end]  # (B, kv, end, hs) each


class KVCache:
    """Per-layer caches plus ``length``, the number of positions already stored."""

    def __init__(
        self,
        *,
        n_layers: int,
        batch_size: int,
        n_kv_heads: int,
        head_dim: int,
        max_length: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        shape = (batch_size, n_kv_heads, max_length, head_dim)
        self.layers = [
            LayerCache(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype))
            for _ in range(n_layers)
        ]
        self.max_length = max_length
        self.length = 0

    @classmethod
    def for_model(cls, model: Transformer, *, batch_size: int, max_length: int,
                  device: torch.device | str | None = None) -> KVCache:
        """A cache sized for ``model``'s attention layers, on its device (or ``device``: "meta" sizes one for
        nothing) and in its dtype."""
        if model.spec is None:  # a Transformer put together by hand: nothing says its attention's sizes
            raise TypeError("KVCache.for_model needs a model built from a spec (model.spec is None); "
                            "size the cache with KVCache(n_layers=..., n_kv_heads=..., head_dim=...)")
        cfg = model.spec.model
        weight = next(model.parameters())
        return cls(n_layers=cfg.n_layers, batch_size=batch_size, n_kv_heads=cfg.kv_heads, head_dim=cfg.head_dim,
                   max_length=max_length, device=weight.device if device is None else device, dtype=weight.dtype)

    def check_room(self, start: int, n_tokens: int) -> None:
        """Before a forward pass: positions start.. must continue (or rewind) the stored prefix and fit."""
        if start > self.length:
            raise ValueError(f"KV cache holds positions 0..{self.length - 1}, cannot continue at position {start}")
        if start + n_tokens > self.max_length:
            raise ContextLengthError(
                f"positions up to {start + n_tokens - 1} requested, but this KV cache holds "
                f"{self.max_length} positions; make a larger cache (max_length)"
            )
