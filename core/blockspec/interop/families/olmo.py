"""OLMo (OlmoForCausalLM, OLMo 1): the Llama-like keys (``llama_like.BASE``) with LayerNorms that have neither
weight nor bias (blockspec-norms' layernorm with ``elementwise_affine = false``, eps 1e-5 fixed: OlmoConfig has
no eps key), one ``attention_bias`` for q, k, v and o, and no norm tensors in its files.

``clip_qkv`` (OLMo-7B-0424's clamp of the q, k and v projections) is refused: blockspec's attention does not
clamp them.
"""

from __future__ import annotations

from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.config_table import Document, Key, table_family
from blockspec.interop.families import llama_like
from blockspec.spec.schema import ModelSpec

ARCHITECTURE = "OlmoForCausalLM"
EPS = 1e-5  # OlmoLayerNorm's, fixed


def _norms(r: ConfigReader, document: Document, title: str) -> None:
    document["norm"] = {"use": "layernorm", "eps": EPS, "elementwise_affine": False, "bias": False}


def _eps_misfits(spec: ModelSpec) -> list[str]:
    eps = getattr(spec.norm.config, "eps", EPS)
    return [] if eps == EPS else [f"[norm] eps = {eps}: OLMo's LayerNorms use eps {EPS}"]


def _refuse_clip(r: ConfigReader, document: Document, title: str) -> None:
    clip = r.get("clip_qkv", float, None)
    if clip is not None:
        r.problem("clip_qkv", f"clamping q, k and v to ±{clip} is not supported",
                  "blockspec's attention does not clamp its projections; expected null")


TABLE = llama_like.BASE.without("rms_norm_eps").but(
    llama_like.head_dim(always=False),  # not an OlmoConfig key, but its attention reads it when given
    llama_like.silu_gate("OLMo's MLP gates with silu (SwiGLU)"), llama_like.ATTENTION_BIAS_ONLY,
    Key(name="clip_qkv", read=_refuse_clip, write=lambda spec: {"clip_qkv": None}),
    Key(name="LayerNorm without weight or bias", read=_norms, misfits=_eps_misfits,
        expresses={"norm": "layernorm", "norm_affine": False}),
)

FAMILY = table_family(name="olmo", title="OLMo", architecture=ARCHITECTURE, model_type="olmo", table=TABLE,
                      rules=llama_like.rules, layer_index=llama_like.LAYER_INDEX, ignored=llama_like.ignored)
