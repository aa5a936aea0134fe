"""Built-in components, registered through the same hook as any plugin.

The plain attention, the dense FFN, and the pre- and post-norm blocks (the ones ``[model]
norm_placement`` names): every spec has them by default, so they come with the core.
"""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen
from attrs.validators import optional

from blockspec.errors import FieldError
from blockspec.spec.validators import OMIT_DEFAULT, greater_than, positive

from blockspec.assembly.context import BuildContext, LayerParts
from blockspec.registry.hookspecs import hookimpl


@frozen(kw_only=True)
class CausalAttentionConfig:
    """Causal self-attention on SDPA with a fused qkv projection; GQA through n_kv_heads.

    Every option is off by default (the plain attention):
    qk_norm: "head" RMS-normalises q and k over each head's head_dim (Qwen3, Gemma 3), "all" over all
    heads' width (OLMo 2), before rotation, with learned scales q_norm and k_norm (eps qk_norm_eps);
    qk_norm_offset: those norms scale by (1 + w), w stored as 0 (Gemma 3's q/k norms);
    logit_softcap: scores -> cap·tanh(scores/cap) before the mask (Gemma 2), on an explicit softmax;
    sliding_window: each query attends to the last w positions, its own included (the KV cache too);
    query_scale: what q·kᵀ is multiplied by, instead of 1/sqrt(head_dim) (Gemma 2: query_pre_attn_scalar**-0.5);
    qkv_bias, out_bias: biases of the qkv and output projections, defaulting to [model] bias (Qwen2: true, false);
    sinks: one learned logit per head joins every row's softmax and takes no value (gpt-oss's attention sinks).
    """

    qk_norm: Literal["none", "head", "all"] = field(default="none", metadata=OMIT_DEFAULT)
    qk_norm_eps: float = field(default=1e-6, validator=greater_than(0.0), metadata=OMIT_DEFAULT)
    qk_norm_offset: bool = field(default=False, metadata=OMIT_DEFAULT)
    logit_softcap: float | None = field(default=None, validator=optional(greater_than(0.0)))
    sliding_window: int | None = field(default=None, validator=optional(positive))
    query_scale: float | None = field(default=None, validator=optional(greater_than(0.0)))
    qkv_bias: bool | None = None
    out_bias: bool | None = None
    sinks: bool = field(default=False, metadata=OMIT_DEFAULT)

    def __attrs_post_init__(self) -> None:
        if self.qk_norm_offset and self.qk_norm == "none":
            raise FieldError("qk_norm_offset", "only with q/k norms, found qk_norm = \"none\"; "
                             "set qk_norm = \"head\" or \"all\"")


def build_causal_attention(config: CausalAttentionConfig, ctx: BuildContext):
    from blockspec.modules.attention import CausalSelfAttention

    model = ctx.model
    return CausalSelfAttention(
        d_model=model.d_model,
        n_heads=model.n_heads,
        n_kv_heads=model.kv_heads,
        bias=model.bias,
        dropout=model.dropout,
        head_dim=model.head_dim,
        qk_norm=config.qk_norm,
        qk_norm_eps=config.qk_norm_eps,
        qk_norm_offset=config.qk_norm_offset,
        logit_softcap=config.logit_softcap,
        sliding_window=config.sliding_window,
        query_scale=config.query_scale,
        qkv_bias=config.qkv_bias,
        out_bias=config.out_bias,
        sinks=config.sinks,
    )


@frozen(kw_only=True)
class DenseFFNConfig:
    """The dense FFN: up-project to d_ff (2·d_ff for gated activations), the spec's activation, down-project."""


def build_dense_ffn(config: DenseFFNConfig, ctx: BuildContext):
    from blockspec.modules.feed_forward import FeedForward

    model = ctx.model
    activation = _layer_of(ctx, "the dense FFN").activation("act")
    return FeedForward(d_model=model.d_model, d_ff=model.d_ff, activation=activation, bias=model.bias)


@frozen(kw_only=True)
class PreConfig:
    """Pre-norm (GPT-2, Llama): x + f(norm(x)) per sublayer; the residual stream is never normalised."""


@frozen(kw_only=True)
class PostConfig:
    """Post-norm (the 2017 paper): norm(x + f(x)) after each sublayer; the stack ends normalised."""


def build_pre(config: PreConfig, ctx: BuildContext):
    from blockspec.modules.blocks import PreNormBlock

    layer = _layer_of(ctx, "a block")  # built in the order of their parameters in the state dict
    return PreNormBlock(norm1=layer.norm("norm1"), attn=layer.attention("attn"), norm2=layer.norm("norm2"),
                        ffn=layer.ffn("ffn"), dropout=layer.dropout)


def build_post(config: PostConfig, ctx: BuildContext):
    from blockspec.modules.blocks import PostNormBlock

    layer = _layer_of(ctx, "a block")
    return PostNormBlock(attn=layer.attention("attn"), norm1=layer.norm("norm1"), ffn=layer.ffn("ffn"),
                         norm2=layer.norm("norm2"), dropout=layer.dropout)


def _layer_of(ctx: BuildContext, what: str) -> LayerParts:
    if ctx.layer is None:
        raise TypeError(f"{what} is built per layer: its BuildContext needs a layer factory (ctx.layer)")
    return ctx.layer


@hookimpl
def blockspec_register(register) -> None:
    register("attention", "causal", CausalAttentionConfig, build_causal_attention,
             promises=("causal", "sliding_window", "logit_softcap", "qk_norm", "qk_norm_offset", "softmax_heads",
                       "sinks", "sink_option", "compiles"))
    register("ffn", "dense", DenseFFNConfig, build_dense_ffn, promises=("position_wise", "compiles"))
    register("block", "pre", PreConfig, build_pre, promises=("residual", "causal", "pre_norm", "compiles"))
    register("block", "post", PostConfig, build_post,
             promises=("causal", "post_norm", "compiles"))  # not "residual": norm(x + 0) is not x
