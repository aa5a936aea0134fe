"""Two causal attentions that decode unpadded batches right and ragged (left-padded) ones wrong.

``padding_blind``: the padding keys the cache marks are attended to. ``slot_positions``: q and k are
turned and biased at the cache's slot, not at each row's position (slot - padding): invisible to a
relative encoder, seen by a bias in the key's absolute position.
"""

from __future__ import annotations

import torch
from attrs import frozen

from blockspec import BuildContext, hookimpl
from blockspec.modules.attention import CausalSelfAttention
from blockspec.modules.kv_cache import LayerCache
from blockspec.modules.positional import PositionalEncoding, score_bias_at


@frozen(kw_only=True)
class PaddingConfig:
    """The core's attention with one ragged-batch bug."""


class PaddingBlindAttention(CausalSelfAttention):
    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
               keys: torch.Tensor | None = None) -> torch.Tensor:
        return super().attend(q, k, v, bias)  # BUG: the cache's key mask dropped, padding keys seen


class SlotPositions(CausalSelfAttention):
    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        if cache is None:
            return super().forward(x, positional, start)
        q, k, v = self.project(x, positional, start)  # BUG: the slot, not cache.positions(start)
        keys = cache.key_mask(start, q.shape[-2])
        k, v = cache.update(k, v, start)  # (B, kv, start+N, hs) each
        bias = score_bias_at(positional, q.shape[-2], k.shape[-2], start) if positional.biases else None
        y = self.attend(q, k, v, bias, keys)  # (B, h, N, hs)
        return self.proj(y.transpose(1, 2).reshape(*x.shape[:2], -1))  # (B, h, N, hs) -> (B, N, d)


def _built(cls: type) -> object:
    def build(config: PaddingConfig, ctx: BuildContext) -> CausalSelfAttention:
        m = ctx.model
        return cls(d_model=m.d_model, n_heads=m.n_heads, n_kv_heads=m.kv_heads, bias=m.bias, dropout=0.0,
                   head_dim=m.head_dim)

    return build


@hookimpl
def blockspec_register(register) -> None:
    register("attention", "padding_blind", PaddingConfig, _built(PaddingBlindAttention), promises=("causal",))
    register("attention", "slot_positions", PaddingConfig, _built(SlotPositions), promises=("causal",))
