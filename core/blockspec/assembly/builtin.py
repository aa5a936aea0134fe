"""Built-in components, registered through the same hook as any plugin."""

from __future__ import annotations

from attrs import frozen

from blockspec.assembly.context import BuildContext
from blockspec.registry.hookspecs import hookimpl


@frozen(kw_only=True)
class CausalAttentionConfig:
    """Causal self-attention on SDPA with a fused qkv projection; GQA through n_kv_heads."""


def build_causal_attention(config: CausalAttentionConfig, ctx: BuildContext):
    from blockspec.modules.attention import CausalSelfAttention

    model = ctx.model
    return CausalSelfAttention(
        d_model=model.d_model,
        n_heads=model.n_heads,
        n_kv_heads=model.kv_heads,
        bias=model.bias,
        dropout=model.dropout,
    )


@hookimpl
def blockspec_register(register) -> None:
    register("attention", "causal", CausalAttentionConfig, build_causal_attention, promises=("causal",))
