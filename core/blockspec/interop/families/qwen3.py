"""Qwen3 (Qwen3ForCausalLM): the Qwen2 keys (``qwen2.TABLE``) with RMSNorm on q and k over each head (before
RoPE, with rms_norm_eps), head_dim 128 unless given, one ``attention_bias`` for q, k, v and o, and no
multimodal RoPE switch.

Sliding windows are read as Qwen2's (``use_sliding_window``, ``layer_types``, ``max_window_layers``).
"""

from __future__ import annotations

from blockspec.interop.config_table import table_family
from blockspec.interop.families import llama_like, qwen2

QWEN3 = "Qwen3ForCausalLM"

TABLE = qwen2.TABLE.without("use_mrope").but(
    llama_like.head_dim(128),  # Qwen3Config's default, whatever hidden_size is
    llama_like.ATTENTION_BIAS_ONLY, llama_like.qk_norms("head"),
    frame={"attention": {"use": "causal"}},
)

FAMILY = table_family(name="qwen3", title="Qwen3", architecture=QWEN3, model_type="qwen3", table=TABLE,
                      rules=llama_like.rules, layer_index=llama_like.LAYER_INDEX, ignored=llama_like.ignored)
