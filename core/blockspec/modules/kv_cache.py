"""A key/value cache for incremental decoding: each layer's k and v, preallocated, written in place.

Generation appends one token at a time; without a cache every step would recompute
k and v for the whole prefix. The cache holds them in (B, kv, T_max, hs) tensors so a
step costs one new row per layer and no allocation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, Self

import torch
from torch import nn

from blockspec.errors import ContextLengthError

if TYPE_CHECKING:
    from blockspec.modules.positional import Start
    from blockspec.modules.transformer import Transformer


class CacheLayout(NamedTuple):
    """What one layer's cache holds per position: ``kv_heads`` rows of ``key_width`` keys and ``value_width``
    values. An attention that caches something else than its keys and values says so in a ``cache_layout``
    attribute (latent attention: one row of the compressed latent, no values)."""

    kv_heads: int
    key_width: int
    value_width: int


def layout_of(block: nn.Module, default: CacheLayout) -> CacheLayout:
    """The ``cache_layout`` of the first module in ``block`` that declares one, else ``default``."""
    for module in block.modules():
        layout = getattr(module, "cache_layout", None)
        if isinstance(layout, tuple):
            return CacheLayout(*layout)
    return default


class LayerCache:
    """One layer's keys and values, (B, kv, T_max, hs) each, and each row's left padding (B,) or None.

    A ragged batch is left-padded: row r's prompt starts at slot ``padding[r]``. The write slot
    (``start``) is shared by all rows; row r's position at a slot is slot - padding[r]. An attention
    reads both from here, so blocks that pass ``start`` and the cache through need not know.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, padding: torch.Tensor | None = None) -> None:
        self.keys = keys
        self.values = values
        self.padding = padding

    def positions(self, start: Start) -> Start:
        """The encoder's start for a call at slot ``start``: ``start`` itself unpadded, else each row's
        first position (B, 1), negative on padding."""
        return row_positions(start, self.padding)

    def key_mask(self, start: Start, n_queries: int) -> torch.Tensor | None:
        """(B, 1, N_q, N_k) bool: which keys ``update`` returned each query may see beyond causality, or None
        (all of them). Padding keys are hidden; a padding query sees itself, so no softmax row is empty."""
        if self.padding is None:
            return None
        n_keys = start + n_queries  # the keys update returned: slots 0..start+N_q-1
        keys = torch.arange(n_keys, device=self.padding.device)  # type: ignore[arg-type]
        queries = start + torch.arange(n_queries, device=self.padding.device)  # (N_q,)
        real = keys[None, None, :] >= self.padding[:, None, None]  # (B, 1, N_k)
        return (real | (keys[None, :] == queries[:, None]))[:, None]  # (B, N_q, N_k) -> (B, 1, N_q, N_k)

    def slots(self, start: Start, n_queries: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The slots of the queries and keys the causal mask compares; None here: the keys ``update`` returns
        end where the queries do, so the mask aligns bottom-right (``StaticLayerCache`` returns them all)."""
        return None

    def update(self, k: torch.Tensor, v: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (B, kv, N, hs) at positions start..start+N-1; return all keys/values up to there."""
        end = start + k.shape[-2]
        self.keys[:, :, start:end] = k
        self.values[:, :, start:end] = v
        return self.keys[:, :, :end], self.values[:, :, :end]  # (B, kv, end, hs) each


class KVCache:
    """Per-layer caches plus ``length``, the number of positions already stored."""

    layer_class: type[LayerCache] = LayerCache  # what each layer's cache is (``StaticKVCache``: fixed shapes)
    static = False  # True: fixed shapes, a tensor slot; the caller checks the request up front

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
        padding: torch.Tensor | None = None,
        layouts: Sequence[CacheLayout] | None = None,
    ) -> None:
        """``padding``: each row's left padding (B,) in a ragged batch (see ``LayerCache``); all zeros is None.
        ``layouts``: each layer's ``CacheLayout`` where they differ from (n_kv_heads, head_dim, head_dim)."""
        layouts = layouts or [CacheLayout(n_kv_heads, head_dim, head_dim)] * n_layers
        if len(layouts) != n_layers:
            raise ValueError(f"layouts: expected one per layer ({n_layers}), found {len(layouts)}")
        self.padding = _padding(padding, batch_size, device)

        def zeros(heads: int, width: int) -> torch.Tensor:
            return torch.zeros((batch_size, heads, max_length, width), device=device, dtype=dtype)  # (B, kv, T, w)

        self.layers = [self.layer_class(zeros(kv, keys), zeros(kv, values), self.padding)
                       for kv, keys, values in layouts]
        self.max_length = max_length
        self.length = 0

    @classmethod
    def for_model(cls, model: Transformer, *, batch_size: int, max_length: int,
                  device: torch.device | str | None = None, padding: torch.Tensor | None = None) -> Self:
        """A cache sized for ``model``'s attention layers, on its device (or ``device``: "meta" sizes one for
        nothing) and in its dtype."""
        if model.spec is None:  # a Transformer put together by hand: nothing says its attention's sizes
            raise TypeError("KVCache.for_model needs a model built from a spec (model.spec is None); "
                            "size the cache with KVCache(n_layers=..., n_kv_heads=..., head_dim=...)")
        cfg = model.spec.model
        weight = next(model.parameters())
        default = CacheLayout(cfg.kv_heads, cfg.head_dim, cfg.head_dim)
        return cls(n_layers=cfg.n_layers, batch_size=batch_size, n_kv_heads=cfg.kv_heads, head_dim=cfg.head_dim,
                   max_length=max_length, device=weight.device if device is None else device, dtype=weight.dtype,
                   padding=padding, layouts=[layout_of(block, default) for block in model.blocks])

    def positions(self, start: Start) -> Start:
        """The encoder's start for a call at slot ``start`` (``LayerCache.positions``)."""
        return row_positions(start, self.padding)

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows ``rows`` (b,), in that order: a generation whose other rows finished
        spends nothing more on them."""
        self.padding = None if self.padding is None else self.padding[rows]  # (B,) -> (b,)
        for layer in self.layers:
            layer.keys, layer.values = layer.keys[rows], layer.values[rows]  # (B, kv, T, hs) -> (b, kv, T, hs)
            layer.padding = self.padding

    def check_room(self, start: int, n_tokens: int) -> None:
        """Before a forward pass: positions start.. must continue (or rewind) the stored prefix and fit."""
        if start > self.length:
            raise ValueError(f"KV cache holds positions 0..{self.length - 1}, cannot continue at position {start}")
        if start + n_tokens > self.max_length:
            raise ContextLengthError(
                f"positions up to {start + n_tokens - 1} requested, but this KV cache holds "
                f"{self.max_length} positions; make a larger cache (max_length)"
            )


def _padding(padding: torch.Tensor | None, batch_size: int, device: torch.device | str | None) -> torch.Tensor | None:
    """Left padding as (B,) long on the cache's device, or None when no row is padded (the unpadded path)."""
    if padding is None:
        return None
    if padding.shape != (batch_size,) or padding.dtype.is_floating_point:
        raise ValueError(f"padding: expected integers of shape ({batch_size},), one per row, "
                         f"found {padding.dtype} of shape {tuple(padding.shape)}")
    if padding.device.type != "meta" and not bool(padding.any()):
        return None
    return padding.to(device=device, dtype=torch.long)


def row_positions(start: Start, padding: torch.Tensor | None) -> Start:
    """Slot ``start`` -> each row's first position (B, 1), ``start`` itself when no row is padded."""
    if padding is None:
        return start
    return start - padding[:, None]  # (B,) -> (B, 1)
