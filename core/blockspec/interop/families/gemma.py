"""Gemma (GemmaForCausalLM): config.json keys, export checks and weight names.

A pre-norm Llama with four differences: RMSNorm scales by (1 + w) (stored w is 0 for the identity),
the embeddings are multiplied by sqrt(hidden_size) rounded to the activations' dtype, the MLP gates
with tanh-approximated GELU (GeGLU), and head_dim is its own key (256 unless given). transformers
reads ``hidden_act``, rewriting the released configs' "gelu" to "gelu_pytorch_tanh"; transformers
before 5.0 read ``hidden_activation`` instead, so where both are set they must agree.
"""

from __future__ import annotations

from typing import Any

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.family import Expresses, Family
from blockspec.interop.families import gemma_shared as shared
from blockspec.interop.families import llama_like

ARCHITECTURE = "GemmaForCausalLM"
TANH_GELU = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")  # ACT2FN names of the tanh approximation
EXPRESSES = Expresses(norm="rmsnorm", activations=("geglu-tanh",), biases="attention_bias_only", head_dim=True,
                      offset=True, embedding_scale=True)
# ---------------------------------------------------------------- config.json -> spec


def spec_dict(r: ConfigReader, name: str) -> dict[str, Any]:
    _activation(r)
    shared.refuse_bidirectional(r)
    model = shared.model_table(r, name, head_dim=256, kv_heads=16)  # GemmaConfig's defaults
    return {
        "model": {**model, "embedding_scale": "sqrt_d"}, "positional": llama_like.full_rope(r, "Gemma"),
        "norm": {"use": "rmsnorm", "eps": r.get("rms_norm_eps", float, 1e-6), "offset": True},
        "activation": {"use": "geglu", "approximate": "tanh"},
        "head": {"use": "lm", "tied": r.get("tie_word_embeddings", bool, True)},
        "attention": shared.attention_table(r),
    }


def _activation(r: ConfigReader) -> None:
    """Only the tanh GELU imports: ``hidden_act`` (where "gelu" means it) and, if set, ``hidden_activation``
    (where "gelu" is the exact GELU that transformers before 5.0 computed for it)."""
    act, older = r.get("hidden_act", str, "gelu_pytorch_tanh"), r.get("hidden_activation", str, None)
    if act is not None and act not in ("gelu", *TANH_GELU):
        r.problem("hidden_act", f"unsupported activation {act!r}",
                  "Gemma's MLP gates with tanh-approximated GELU: expected gelu_pytorch_tanh (or gelu)")
    if older is not None and older not in TANH_GELU:
        r.problem("hidden_activation", f"{older!r} is not tanh-approximated GELU: transformers before 5.0 computed "
                  "it, later ones compute hidden_act", "expected gelu_pytorch_tanh, or remove the key")


# ---------------------------------------------------------------- spec -> config.json


def config_json(spec: ModelSpec) -> dict[str, Any]:
    return {"architectures": [ARCHITECTURE], "model_type": "gemma", **shared.config_keys(spec),
            "hidden_act": "gelu_pytorch_tanh"}


FAMILY = Family(
    name="gemma", title="Gemma", architectures={ARCHITECTURE: "gemma"}, spec_dict=spec_dict,
    misfits=EXPRESSES.misfits, config_json=config_json, rules=llama_like.rules, layer_index=llama_like.LAYER_INDEX,
    ignored=llama_like.ignored,
)
