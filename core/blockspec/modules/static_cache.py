"""A KV cache of fixed shapes, for a decode step that graph-captures (``torch.compile``, CUDA graphs).

``KVCache`` returns the keys written so far, a slice that grows by one each step, and takes ``start`` as
an int: each step has new shapes and constants, so no graph serves two steps. Here ``update`` writes at
tensor slots with ``index_copy_`` and returns the whole (B, kv, T_max, hs) buffers; the slots attention
needs for its causal mask come from ``slots``, so every step is the same graph with new values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from blockspec.modules.kv_cache import KVCache, LayerCache

if TYPE_CHECKING:
    from blockspec.modules.positional import Start

__all__ = ["StaticKVCache", "StaticLayerCache"]


class StaticLayerCache(LayerCache):
    """One layer's (B, kv, T_max, hs) keys and values, always returned whole; unwritten slots stay masked."""

    def slots(self, start: Start, n_queries: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The slots of a call's queries (N_q,) and of every key ``update`` returns (T_max,): what the causal
        (and window) mask compares, since the keys no longer end where the queries do."""
        keys = torch.arange(self.keys.shape[-2], device=self.keys.device)  # (T_max,)
        return start + keys[:n_queries], keys  # (N_q,), (T_max,)

    def key_mask(self, start: Start, n_queries: int) -> torch.Tensor | None:
        """(B, 1, N_q, T_max) bool: padding keys hidden, a padding query seeing itself (``LayerCache.key_mask``),
        over all T_max slots; None when no row is padded (causality comes from ``slots``)."""
        if self.padding is None:
            return None
        queries, keys = self.slots(start, n_queries)
        real = keys[None, None, :] >= self.padding[:, None, None]  # (B, 1, T_max)
        return (real | (keys[None, :] == queries[:, None]))[:, None]  # (B, N_q, T_max) -> (B, 1, N_q, T_max)

    def update(self, k: torch.Tensor, v: torch.Tensor, start: Start) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (B, kv, N, hs) at slots start..start+N-1 in place; return the whole buffers."""
        at = start + torch.arange(k.shape[-2], device=self.keys.device)  # (N,)
        self.keys.index_copy_(2, at, k.to(self.keys.dtype))
        self.values.index_copy_(2, at, v.to(self.values.dtype))
        return self.keys, self.values  # (B, kv, T_max, hs) each


class StaticKVCache(KVCache):
    """``KVCache`` whose layers are ``StaticLayerCache``: the same sizes, padding and checks."""

    layer_class = StaticLayerCache
    static = True

    def buffers(self) -> list[torch.Tensor]:
        """Every layer's keys and values: what a compiled step mutates, so they keep fixed addresses."""
        return [t for layer in self.layers for t in (layer.keys, layer.values)]
