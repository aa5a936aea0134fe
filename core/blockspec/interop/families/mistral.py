"""Mistral (MistralForCausalLM): the Llama layer without biases, with an optional head_dim and a sliding
window on every layer (``sliding_window``; null: full attention, as from Mistral 7B v0.2 on).

transformers' window and blockspec's agree: query i sees keys i - w + 1 .. i, its own included.
"""

from __future__ import annotations

from typing import Any

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader, rope_json
from blockspec.interop.family import Expresses, Family
from blockspec.interop.families import llama_like

MISTRAL = "MistralForCausalLM"


# ---------------------------------------------------------------- config.json -> spec


def spec_dict(r: ConfigReader, name: str) -> dict[str, Any]:
    model = llama_like.sizes(r, name)
    model.update(bias=False, dropout=r.get("attention_dropout", float, 0.0))
    llama_like.read_head_dim(r, model)
    window = llama_like.window_key(r, 4096)  # MistralConfig's default when the key is absent
    _layer_types(r, window)
    return llama_like.document(
        model, positional=llama_like.full_rope(r, "Mistral"),
        norm={"use": "rmsnorm", "eps": r.get("rms_norm_eps", float, 1e-6)}, activation=llama_like.silu_gate(r),
        tied=r.get("tie_word_embeddings", bool, False), attention=llama_like.window_attention(window),
    )


def _layer_types(r: ConfigReader, window: int | None) -> None:
    """MistralForCausalLM ignores layer_types (every layer has sliding_window): a config whose layer_types
    disagree meant another model (Ministral alternates), so only agreeing ones are accepted."""
    types = r.get("layer_types", list, None)
    expected = "full_attention" if window is None else "sliding_attention"
    if types is not None and any(t != expected for t in types):
        r.problem("layer_types", f"expected every layer {expected!r}: MistralForCausalLM gives every layer the "
                  "same attention and ignores layer_types", "alternating layers are a MinistralForCausalLM")


# ---------------------------------------------------------------- spec -> config.json


EXPRESSES = Expresses(norm="rmsnorm", activations=("swiglu",), biases="none", windows="all", head_dim=True)


def config_json(spec: ModelSpec) -> dict[str, Any]:
    return {
        "architectures": [MISTRAL], "model_type": "mistral", **llama_like.size_keys(spec),
        "head_dim": spec.model.head_dim, "hidden_act": "silu", "rms_norm_eps": spec.norm.config.eps,
        **rope_json(spec.positional.config), **llama_like.window_json(spec), "attention_dropout": spec.model.dropout,
    }


FAMILY = Family(
    name="mistral", title="Mistral", architectures={MISTRAL: "mistral"}, spec_dict=spec_dict,
    misfits=EXPRESSES.misfits, config_json=config_json, rules=llama_like.rules, layer_index=llama_like.LAYER_INDEX,
    ignored=llama_like.ignored,
)
