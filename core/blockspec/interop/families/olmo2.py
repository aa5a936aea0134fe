"""OLMo 2 (Olmo2ForCausalLM): the Llama-like keys (``llama_like.BASE``) and its differences, and weight names.

Llama's attention and SwiGLU MLP, with the norms moved from the sublayers' inputs to their outputs
(blockspec's "output_norm" block, x + norm(f(x)): no pre-norms), and queries and keys RMS-normalised
over all heads' width before the rotation (qk_norm = "all", eps ``rms_norm_eps`` like every norm).
Olmo2Config has no head_dim, but the attention reads one when config.json gives it.
"""

from __future__ import annotations

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_table import table_family
from blockspec.interop.families import llama_like
from blockspec.interop.weight_map import Rule

ARCHITECTURE = "Olmo2ForCausalLM"
NORMS = (("norm1", "post_attention_layernorm"), ("norm2", "post_feedforward_layernorm"))

TABLE = llama_like.BASE.but(
    llama_like.head_dim(always=False, as_given=True),  # not an Olmo2Config key: written only when the spec sets it
    llama_like.rms_norm_eps(1e-5),  # Olmo2Config's default
    llama_like.silu_gate("OLMo 2's MLP gates with silu (SwiGLU)"), llama_like.ATTENTION_BIAS_ONLY,
    llama_like.qk_norms("all"), frame={"block": {"use": "output_norm"}}, blocks=("output_norm",),
)


def rules(spec: ModelSpec) -> list[Rule]:
    return llama_like.rules(spec, NORMS)


FAMILY = table_family(name="olmo2", title="OLMo 2", architecture=ARCHITECTURE, model_type="olmo2", table=TABLE,
                      rules=rules, layer_index=llama_like.LAYER_INDEX, ignored=llama_like.ignored)
