"""Llama (LlamaForCausalLM): config.json keys, export checks; its weight map is the Llama-like one
(``llama_like``): separate q/k/v/o and gate/up/down projections, RMSNorm, RoPE in the half layout.

MistralForCausalLM, the same layer with a sliding window, is its own family (``mistral``).
"""

from __future__ import annotations

from typing import Any

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader, rope_json
from blockspec.interop.family import Expresses, Family
from blockspec.interop.families import llama_like

LLAMA = "LlamaForCausalLM"


# ---------------------------------------------------------------- config.json -> spec


def spec_dict(r: ConfigReader, name: str) -> dict[str, Any]:
    model = llama_like.sizes(r, name)
    attention_bias, mlp_bias = r.get("attention_bias", bool, False), r.get("mlp_bias", bool, False)
    llama_like.read_head_dim(r, model)
    _refuse_window(r)
    r.accept("pretraining_tp")  # splits the matmuls of a tensor-parallel run into slices: the same sums
    model.update(bias=mlp_bias, dropout=r.get("attention_dropout", float, 0.0))
    attention = {"use": "causal"}
    if attention_bias != mlp_bias:  # attention_bias covers q, k, v and o alike
        attention.update(qkv_bias=attention_bias, out_bias=attention_bias)
    return llama_like.document(
        model, positional=llama_like.full_rope(r, "Llama"),
        norm={"use": "rmsnorm", "eps": r.get("rms_norm_eps", float, 1e-6)}, activation=llama_like.silu_gate(r),
        tied=r.get("tie_word_embeddings", bool, False), attention=attention,
    )


def _refuse_window(r: ConfigReader) -> None:
    """LlamaForCausalLM ignores sliding_window; a config that sets one shorter than the context meant a Mistral."""
    window, max_positions = r.get("sliding_window", int, None), r.get("max_position_embeddings", int, None)
    if window is not None and r.get("use_sliding_window", bool, True) and max_positions and window < max_positions:
        r.problem("sliding_window", f"sliding-window attention ({window} < max_position_embeddings = "
                  f"{max_positions}) is not supported", "LlamaForCausalLM attends to every position; "
                  "a sliding-window model is a MistralForCausalLM")


# ---------------------------------------------------------------- spec -> config.json


EXPRESSES = Expresses(norm="rmsnorm", activations=("swiglu",), biases="attention_bias", head_dim=True)


def config_json(spec: ModelSpec) -> dict[str, Any]:
    m = spec.model
    attention_bias, _, mlp_bias = llama_like.biases(spec)
    return {
        "architectures": [LLAMA], "model_type": "llama", "vocab_size": m.vocab_size, "hidden_size": m.d_model,
        "intermediate_size": m.d_ff, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
        "num_key_value_heads": m.kv_heads, "head_dim": m.head_dim, "hidden_act": "silu",
        "max_position_embeddings": m.context_length, "rms_norm_eps": spec.norm.config.eps,
        **rope_json(spec.positional.config),
        "attention_bias": attention_bias, "mlp_bias": mlp_bias, "attention_dropout": m.dropout,
        "tie_word_embeddings": spec.head.config.tied,
    }


FAMILY = Family(
    name="llama", title="Llama", architectures={LLAMA: "llama"}, spec_dict=spec_dict,
    misfits=EXPRESSES.misfits, config_json=config_json, rules=llama_like.rules, layer_index=llama_like.LAYER_INDEX,
    ignored=llama_like.ignored,
)
