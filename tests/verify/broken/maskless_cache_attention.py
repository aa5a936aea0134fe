"""Causal attention that drops its mask whenever a cache is passed ("one new token sees every key").

True of a single decoded token, so token-by-token decoding still matches; but a prompt run through
the cache in one call lets every prompt token see the ones after it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from attrs import frozen

from blockspec import BuildContext, hookimpl
from blockspec.modules.attention import CausalSelfAttention
from blockspec.modules.kv_cache import LayerCache
from blockspec.modules.positional import PositionalEncoding


@frozen(kw_only=True)
class MasklessConfig:
    """The core's attention, unmasked under a cache (wrong for a prompt of more than one token)."""


class MasklessCacheAttention(CausalSelfAttention):
    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        if cache is None:
            return super().forward(x, positional, start)
        q, k, v = self.project(x, positional, start)
        k, v = cache.update(k, v, start)  # (B, kv, start+N, hs) each
        bias = positional.score_bias(q.shape[-2], k.shape[-2], start) if positional.biases else None
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None if bias is None else bias.to(q.dtype),
                                           enable_gqa=self.n_kv_heads != self.n_heads)  # no causal mask
        return self.proj(y.transpose(1, 2).reshape(*x.shape[:2], -1))  # (B, N, d)


def build(config: MasklessConfig, ctx: BuildContext) -> CausalSelfAttention:
    m = ctx.model
    return MasklessCacheAttention(d_model=m.d_model, n_heads=m.n_heads, n_kv_heads=m.kv_heads, bias=m.bias,
                                  dropout=0.0, head_dim=m.head_dim)


@hookimpl
def blockspec_register(register) -> None:
    register("attention", "maskless_cache", MasklessConfig, build, promises=("causal",))
