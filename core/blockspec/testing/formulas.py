"""Exact closed-form parameter counts: the chapter's 12·L·d² + |V|·d, without the rounding.

The core's own modules (embedding, attention, FFN) have formulas here; a plugin
component's share is whatever it holds when built on its own (a tied head holds
nothing of its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from blockspec.spec.schema import ModelConfig


def attention_parameters(model: ModelConfig, *, qkv_bias: bool | None = None, out_bias: bool | None = None,
                         qk_norm: Literal["none", "head", "all"] = "none", sinks: bool = False) -> int:
    """Fused qkv (d -> h·hs + 2·kv·hs) and the output projection (h·hs -> d), with biases if any
    (``qkv_bias``/``out_bias`` None: [model] bias), the qk-norm scales (hs each, or the heads' widths) and
    the sink logits (one per head).

    The options are arguments, not read off a config by field name: the caller knows which config it holds."""
    d, width, kv_width = model.d_model, model.n_heads * model.head_dim, 2 * model.kv_heads * model.head_dim
    weights = d * (width + kv_width) + width * d
    qkv_bias = model.bias if qkv_bias is None else qkv_bias
    out_bias = model.bias if out_bias is None else out_bias
    norms = {"none": 0, "head": 2 * model.head_dim, "all": width + kv_width // 2}[qk_norm]
    sink_logits = model.n_heads if sinks else 0
    return weights + (width + kv_width if qkv_bias else 0) + (d if out_bias else 0) + norms + sink_logits


def ffn_parameters(model: ModelConfig, *, gated: bool) -> int:
    """Up (d -> d_ff, or 2·d_ff when gated) and down (d_ff -> d), with biases if any."""
    d, width = model.d_model, (2 if gated else 1) * model.d_ff
    weights = d * width + model.d_ff * d
    return weights + (width + d if model.bias else 0)


def layernorm_parameters(model: ModelConfig, *, affine: bool = True, bias: bool = True) -> int:
    return model.d_model * (int(affine) + int(affine and bias))


def model_parameters(model: ModelConfig, *, positional: int, norm: int, attention: int, head: int,
                     gated: bool, ffn: int | Sequence[int] | None = None, block: int | Sequence[int] | None = None,
                     norms: int = 2, activation: int = 0) -> int:
    """The exact count: embedding + positions + L·(attention + FFN + norms) + final norm + head.

    ``activation``: what the activation holds itself (a learned β in x·sigmoid(βx)), once per dense FFN;
    ``ffn``: an FFN component's own count instead of the dense one's (its activation included);
    ``norms``: how many norms the block holds (pre and post: 2; the layout's own number for others, e.g. a
    sandwich's 4); ``block``: a block component's whole count (with the kit's reference sublayers) instead
    of the sum. ``ffn`` and ``block`` may be one count per layer (n_layers of them), for components whose
    layers differ.
    """
    if block is None:
        dense = ffn_parameters(model, gated=gated) + activation
        ffns = per_layer(dense if ffn is None else ffn, model.n_layers)
        block = [attention + f + norms * norm for f in ffns]
    final = norm if model.has_final_norm else 0
    return model.vocab_size * model.d_model + positional + sum(per_layer(block, model.n_layers)) + final + head


def per_layer(count: int | Sequence[int], n_layers: int) -> list[int]:
    """One count for every layer, or a count per layer as given."""
    counts = [count] * n_layers if isinstance(count, int) else list(count)
    if len(counts) != n_layers:
        raise ValueError(f"{len(counts)} per-layer counts for {n_layers} layers")
    return counts


def gpt2_parameters(model: ModelConfig) -> int:
    """Learned positions, LayerNorm with bias, GELU, tied head: GPT-2's exact count."""
    return model_parameters(
        model, positional=model.context_length * model.d_model, norm=layernorm_parameters(model),
        attention=attention_parameters(model), head=0, gated=False,
    )
