"""Qwen2 (Qwen2ForCausalLM): the Llama layer with biases on q, k and v only, and sliding windows on the
layers ``layer_types`` (or, before it, ``max_window_layers``) says, when ``use_sliding_window``.

Per-layer windows become [[layers]] rules adding ``sliding_window`` to the sliding layers.
"""

from __future__ import annotations

from typing import Any

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader, rope_json
from blockspec.interop.family import Expresses, Family
from blockspec.interop.families import llama_like

QWEN2 = "Qwen2ForCausalLM"


# ---------------------------------------------------------------- config.json -> spec


def spec_dict(r: ConfigReader, name: str) -> dict[str, Any]:
    model = llama_like.sizes(r, name)
    model.update(bias=False, dropout=r.get("attention_dropout", float, 0.0))
    llama_like.read_head_dim(r, model)  # not a Qwen2Config key, but Qwen2Attention reads it when given
    if r.get("use_mrope", bool, False):
        r.problem("use_mrope", "multimodal RoPE (Qwen2-VL) is not supported",
                  "Qwen2ForCausalLM rotates by the token position alone; expected false")
    attention, layers = llama_like.windowed({"use": "causal", "qkv_bias": True},
                                            llama_like.qwen_windows(r, model["n_layers"]))
    return llama_like.document(
        model, positional=llama_like.full_rope(r, "Qwen2"),
        norm={"use": "rmsnorm", "eps": r.get("rms_norm_eps", float, 1e-6)}, activation=llama_like.silu_gate(r),
        tied=r.get("tie_word_embeddings", bool, False), attention=attention, layers=layers,
    )


# ---------------------------------------------------------------- spec -> config.json


EXPRESSES = Expresses(norm="rmsnorm", activations=("swiglu",), biases="qkv_only", windows="per_layer",
                      head_dim=True)


def config_json(spec: ModelSpec) -> dict[str, Any]:
    return {
        "architectures": [QWEN2], "model_type": "qwen2", **llama_like.size_keys(spec),
        **llama_like.given_head_dim(spec), "hidden_act": "silu", "rms_norm_eps": spec.norm.config.eps,
        **rope_json(spec.positional.config), **llama_like.qwen_windows_json(spec),
        "attention_dropout": spec.model.dropout,
    }


FAMILY = Family(
    name="qwen2", title="Qwen2", architectures={QWEN2: "qwen2"}, spec_dict=spec_dict,
    misfits=EXPRESSES.misfits, config_json=config_json, rules=llama_like.rules, layer_index=llama_like.LAYER_INDEX,
    ignored=llama_like.ignored,
)
