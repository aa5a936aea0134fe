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


@frozen(kw_only=True)
class DenseFFNConfig:
    """The dense FFN: up-project to d_ff (2·d_ff for gated activations), the spec's activation, down-project."""


def build_dense_ffn(config: DenseFFNConfig, ctx: BuildContext):
    from blockspec.modules.feed_forward import FeedForward

    if ctx.layer is None:
        raise TypeError("the dense FFN is built per layer: its BuildContext needs a layer factory (ctx.layer)")
    model = ctx.model
    return FeedForward(d_model=model.d_model, d_ff=model.d_ff, activation=ctx.layer.activation("act"), bias=model.bias)


@hookimpl
def blockspec_register(register) -> None:
    register("attention", "causal", CausalAttentionConfig, build_causal_attention, promises=("causal",))
    register("ffn", "dense", DenseFFNConfig, build_dense_ffn, promises=("position_wise",))
