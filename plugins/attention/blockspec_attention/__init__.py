"""blockspec-attention: attention variants beyond the core's causal attention.

``mla``: DeepSeek V2/V3's multi-head latent attention. Configs live here and stay torch-free so
discovery is cheap; the module loads on build.
"""

from __future__ import annotations

from attrs import field, frozen
from attrs.validators import optional

from blockspec.plugin import OMIT_DEFAULT, BuildContext, ModelConfig, Register, greater_than, hookimpl, positive

BLOCKSPEC_API = 1


@frozen(kw_only=True)
class MLAConfig:
    """Multi-head latent attention (DeepSeek V2/V3): keys and values come from one low-rank latent per token,
    which is all the KV cache keeps, beside one shared rotary key.

    kv_lora_rank: the latent's width (DeepSeek V3: 512); q_lora_rank: the queries' own low-rank bottleneck
    (1536), or None for a full q projection (V2-Lite); nope_head_dim: each head's key features that do not
    rotate (128); v_head_dim: each head's value width (128). The rotating part of each head is [model]
    head_dim wide (64), as transformers' DeepseekV3Config calls it, and [positional] rotates it.
    latent_norm_eps: the RMSNorms of the latents; query_scale: what q·kᵀ is multiplied by, default
    1/√(nope_head_dim + head_dim) (a yarn rope's mscale² folds in here).
    """

    kv_lora_rank: int = field(default=512, validator=positive)
    q_lora_rank: int | None = field(default=None, validator=optional(positive))
    nope_head_dim: int = field(default=128, validator=positive)
    v_head_dim: int = field(default=128, validator=positive)
    latent_norm_eps: float = field(default=1e-6, validator=greater_than(0.0), metadata=OMIT_DEFAULT)
    query_scale: float | None = field(default=None, validator=optional(greater_than(0.0)), metadata=OMIT_DEFAULT)


def build_mla(config: MLAConfig, ctx: BuildContext):
    from .mla import LatentAttention

    model = ctx.model
    return LatentAttention(d_model=model.d_model, n_heads=model.n_heads, rope_head_dim=model.head_dim,
                           nope_head_dim=config.nope_head_dim, v_head_dim=config.v_head_dim,
                           kv_lora_rank=config.kv_lora_rank, q_lora_rank=config.q_lora_rank, bias=model.bias,
                           dropout=model.dropout, latent_norm_eps=config.latent_norm_eps,
                           query_scale=config.query_scale)


def one_latent(model: ModelConfig) -> bool:
    """[model] n_kv_heads unset or n_heads, and an even head_dim (every head reads one latent; RoPE turns pairs)"""
    return model.n_kv_heads in (None, model.n_heads) and model.head_dim % 2 == 0


@hookimpl
def blockspec_register(register: Register) -> None:
    register("attention", "mla", MLAConfig, build_mla, promises=("causal", "softmax_heads", "compiles"),
             serves=one_latent)
