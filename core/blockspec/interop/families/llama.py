"""Llama (LlamaForCausalLM): the Llama-like keys (``llama_like.BASE``) with attention_bias and mlp_bias, no
sliding window; its weight map is the Llama-like one: separate q/k/v/o and gate/up/down projections,
RMSNorm, RoPE in the half layout.

MistralForCausalLM, the same layer with a sliding window, is its own family (``mistral``).
"""

from __future__ import annotations

from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.config_table import Document, Key, accepted, table_family
from blockspec.interop.family import biases
from blockspec.interop.families import llama_like

LLAMA = "LlamaForCausalLM"


def _biases(r: ConfigReader, document: Document, title: str) -> None:
    """mlp_bias is [model] bias; attention_bias covers q, k, v and o alike, written only where it differs."""
    attention_bias, mlp_bias = r.get("attention_bias", bool, False), r.get("mlp_bias", bool, False)
    document["model"]["bias"] = mlp_bias
    if attention_bias != mlp_bias:
        document["attention"].update(qkv_bias=attention_bias, out_bias=attention_bias)


def _refuse_window(r: ConfigReader, document: Document, title: str) -> None:
    """LlamaForCausalLM ignores sliding_window; a config that sets one shorter than the context meant a Mistral."""
    window, max_positions = r.get("sliding_window", int, None), r.get("max_position_embeddings", int, None)
    if window is not None and r.get("use_sliding_window", bool, True) and max_positions and window < max_positions:
        r.problem("sliding_window", f"sliding-window attention ({window} < max_position_embeddings = "
                  f"{max_positions}) is not supported", "LlamaForCausalLM attends to every position; "
                  "a sliding-window model is a MistralForCausalLM")


TABLE = llama_like.BASE.but(
    Key(name="attention_bias", read=_biases, expresses={"biases": "attention_bias"},
        write=lambda spec: {"attention_bias": biases(spec)[0], "mlp_bias": biases(spec)[2]}),
    Key(name="sliding_window", read=_refuse_window),
    accepted("pretraining_tp"),  # splits the matmuls of a tensor-parallel run into slices: the same sums
)

FAMILY = table_family(name="llama", title="Llama", architecture=LLAMA, model_type="llama", table=TABLE,
                      rules=llama_like.rules, layer_index=llama_like.LAYER_INDEX, ignored=llama_like.ignored)
