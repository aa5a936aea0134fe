"""Qwen3 (Qwen3ForCausalLM): the Qwen2 layer with RMSNorm on q and k over each head (before RoPE, with
rms_norm_eps), head_dim 128 unless given, and one ``attention_bias`` for q, k, v and o.

Sliding windows are read as Qwen2's (``use_sliding_window``, ``layer_types``, ``max_window_layers``).
"""

from __future__ import annotations

from typing import Any

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader, rope_json
from blockspec.interop.family import Expresses, Family, biases
from blockspec.interop.families import llama_like

QWEN3 = "Qwen3ForCausalLM"


# ---------------------------------------------------------------- config.json -> spec


def spec_dict(r: ConfigReader, name: str) -> dict[str, Any]:
    model = llama_like.sizes(r, name)
    model.update(bias=False, dropout=r.get("attention_dropout", float, 0.0))
    llama_like.read_head_dim(r, model, default=128)  # Qwen3Config's default, whatever hidden_size is
    eps = r.get("rms_norm_eps", float, 1e-6)
    attention: dict[str, Any] = {"use": "causal", "qk_norm": "head", "qk_norm_eps": eps}
    if r.get("attention_bias", bool, False):
        attention.update(qkv_bias=True, out_bias=True)
    attention, layers = llama_like.windowed(attention, llama_like.qwen_windows(r, model["n_layers"]))
    return llama_like.document(
        model, positional=llama_like.full_rope(r, "Qwen3"), norm={"use": "rmsnorm", "eps": eps},
        activation=llama_like.silu_gate(r), tied=r.get("tie_word_embeddings", bool, False), attention=attention,
        layers=layers,
    )


# ---------------------------------------------------------------- spec -> config.json


EXPRESSES = Expresses(norm="rmsnorm", activations=("swiglu",), biases="attention_bias_only",
                      windows="per_layer", qk_norm="head", head_dim=True)


def config_json(spec: ModelSpec) -> dict[str, Any]:
    return {
        "architectures": [QWEN3], "model_type": "qwen3", **llama_like.size_keys(spec),
        "head_dim": spec.model.head_dim, "hidden_act": "silu", "rms_norm_eps": spec.norm.config.eps,
        **rope_json(spec.positional.config), **llama_like.qwen_windows_json(spec),
        "attention_bias": biases(spec)[0], "attention_dropout": spec.model.dropout,
    }


FAMILY = Family(
    name="qwen3", title="Qwen3", architectures={QWEN3: "qwen3"}, spec_dict=spec_dict,
    misfits=EXPRESSES.misfits, config_json=config_json, rules=llama_like.rules, layer_index=llama_like.LAYER_INDEX,
    ignored=llama_like.ignored,
)
