"""OLMo 2 (Olmo2ForCausalLM): config.json keys, export checks and weight names.

Llama's attention and SwiGLU MLP, with the norms moved from the sublayers' inputs to their outputs
(blockspec's "output_norm" block, x + norm(f(x)): no pre-norms), and queries and keys RMS-normalised
over all heads' width before the rotation (qk_norm = "all", eps ``rms_norm_eps`` like every norm).
Olmo2Config has no head_dim, but the attention reads one when config.json gives it.
"""

from __future__ import annotations

from typing import Any

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.family import Expresses, Family
from blockspec.interop.families import gemma_shared as shared
from blockspec.interop.families import llama_like
from blockspec.interop.weight_map import Rule

ARCHITECTURE = "Olmo2ForCausalLM"
EXPRESSES = Expresses(norm="rmsnorm", activations=("swiglu",), biases="attention_bias_only", blocks=("output_norm",),
                      qk_norm="all", head_dim=True)
NORMS = (("norm1", "post_attention_layernorm"), ("norm2", "post_feedforward_layernorm"))


# ---------------------------------------------------------------- config.json -> spec


def spec_dict(r: ConfigReader, name: str) -> dict[str, Any]:
    act = r.get("hidden_act", str, "silu")
    if act not in ("silu", "swish", None):
        r.problem("hidden_act", f"unsupported activation {act!r}", "OLMo 2's MLP gates with silu (SwiGLU)")
    eps = r.get("rms_norm_eps", float, 1e-5)  # Olmo2Config's default
    return {
        "model": shared.model_table(r, name, head_dim=None, kv_heads=None), "block": {"use": "output_norm"},
        "positional": llama_like.full_rope(r, "OLMo 2"), "norm": {"use": "rmsnorm", "eps": eps},
        "activation": {"use": "swiglu"}, "head": {"use": "lm", "tied": r.get("tie_word_embeddings", bool, False)},
        "attention": shared.attention_table(r, qk_norm="all", qk_norm_eps=eps),
    }


# ---------------------------------------------------------------- spec -> config.json


def config_json(spec: ModelSpec) -> dict[str, Any]:
    keys = shared.config_keys(spec)
    if spec.model.given_head_dim is None:
        del keys["head_dim"]  # not an Olmo2Config key: written only when the spec sets it
    return {"architectures": [ARCHITECTURE], "model_type": "olmo2", **keys, "hidden_act": "silu"}


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec) -> list[Rule]:
    return llama_like.rules(spec, NORMS)


FAMILY = Family(
    name="olmo2", title="OLMo 2", architectures={ARCHITECTURE: "olmo2"}, spec_dict=spec_dict,
    misfits=EXPRESSES.misfits, config_json=config_json, rules=rules, layer_index=llama_like.LAYER_INDEX,
    ignored=llama_like.ignored,
)
