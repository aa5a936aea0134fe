"""gpt-oss (GptOssForCausalLM): its config.json keys (one table, ``TABLE``) and weight names.

Llama's layer with biases on q, k, v and o (``attention_bias``), a learned sink logit per head
(``[attention] sinks``), a sliding window on every other layer from the first (``layer_types``), and every
FFN a mixture of experts with biases: a biased router whose softmax over its top-k logits is blockspec-moe's
renormalised top-k, and gpt-oss's clamped SwiGLU (``swiglu_alpha``, ``swiglu_limit``). The experts are stored
stacked and transposed, (E, d, 2·d_ff) for gate_up_proj with gate and up features interleaved in pairs,
where blockspec keeps (E, 2·d_ff, d) halves, gate first: the weight map de-interleaves them. RoPE is YaRN
(factor 32 over 4096 positions, base 150000) when the config says nothing.
"""

from __future__ import annotations

from typing import Any

from blockspec.interop.config_reader import ConfigReader, rope
from blockspec.interop.config_table import Document, Key, accepted, mapped, table_family
from blockspec.interop.families import llama_like
from blockspec.interop.families.qwen2 import place_windows, typed_windows
from blockspec.interop.families.smollm3 import layer_selector
from blockspec.interop.family import SOFTMAX_TOP_K, biases, moe_option_misfits, windows_of
from blockspec.interop.weight_map import Rule, interleaved, same
from blockspec.spec.schema import ModelSpec

ARCHITECTURE = "GptOssForCausalLM"
DEFAULT_BASE = 150000.0  # GptOssConfig.default_theta
DEFAULT_ROPE = {"scaling": "yarn", "factor": 32.0, "original_context_length": 4096, "beta_fast": 32.0,
                "beta_slow": 1.0, "truncate": False}  # GptOssConfig's rope_parameters when config.json has none
DEFAULT_WINDOW = 128


def _positional(r: ConfigReader, document: Document, title: str) -> None:
    """rope(r), with GptOssConfig's YaRN where no rope table is given and its base where no rope_theta is."""
    tables = [r.config.get(name) for name in ("rope_parameters", "rope_scaling")]
    positional = rope(r)
    if not any(isinstance(t, dict) for t in tables):
        positional = {**positional, **DEFAULT_ROPE}
    if not any(isinstance(t, dict) and t.get("rope_theta") is not None for t in tables) \
            and r.config.get("rope_theta") is None:
        positional["base"] = DEFAULT_BASE
    document["positional"] = llama_like.refuse_fraction(r, positional, title)


def _activation(r: ConfigReader, document: Document, title: str) -> None:
    """The experts' clamped SwiGLU; hidden_act is a config key gpt-oss's experts never read."""
    r.get("hidden_act", str, "silu")
    document["activation"] = {"use": "clamped_swiglu", "alpha": r.get("swiglu_alpha", float, 1.702),
                              "limit": r.get("swiglu_limit", float, 7.0)}


def _activation_json(spec: ModelSpec) -> dict[str, Any]:
    config = spec.activation.config
    return {"hidden_act": "silu", "swiglu_alpha": config.alpha, "swiglu_limit": config.limit}


def _attention_bias(r: ConfigReader, document: Document, title: str) -> None:
    """attention_bias (true by default) for q, k, v and o; the experts and the router always have biases."""
    if not r.get("attention_bias", bool, True):
        document["attention"].update(qkv_bias=False, out_bias=False)


def _read_windows(r: ConfigReader, document: Document, title: str) -> None:
    """layer_types (default: sliding on layers 0, 2, 4, ...) with the one sliding_window (128)."""
    n_layers = document["model"]["n_layers"] or 0
    window = llama_like.nullable(r, "sliding_window", int, DEFAULT_WINDOW)
    if window is None and r.config.get("sliding_window") is not None:
        return  # refused at $.sliding_window already: the layers' windows would only repeat it
    types = r.get("layer_types", list, None)
    if types is None:
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)]
    place_windows(document, typed_windows(r, types, window, n_layers), layer_selector)


def _write_windows(spec: ModelSpec) -> dict[str, Any]:
    windows = windows_of(spec)
    sliding = [w for w in windows if w is not None]
    return {"sliding_window": sliding[0] if sliding else DEFAULT_WINDOW,
            "layer_types": ["sliding_attention" if w is not None else "full_attention" for w in windows]}


def _experts_per_token(r: ConfigReader, document: Document, title: str) -> None:
    """experts_per_token, beside num_experts_per_tok in the released config.json: refused unless they agree."""
    given = r.get("experts_per_token", int, None)
    if given is not None and given != document["ffn"]["top_k"]:
        r.problem("experts_per_token", f"{given} differs from num_experts_per_tok = {document['ffn']['top_k']}",
                  "transformers reads num_experts_per_tok: make them agree")


def _refuse_quantization(r: ConfigReader, document: Document, title: str) -> None:
    method = r.config.get("quantization_config")
    if method is not None:
        r.accept("quantization_config")
        r.problem("quantization_config", f"quantized weights ({str(method)[:40]}) are not supported",
                  "blockspec reads float weights: load with transformers' Mxfp4Config(dequantize=True), "
                  "save_pretrained, and import that")


def _routing_misfits(spec: ModelSpec) -> list[str]:
    """blockspec-moe as gpt-oss routes: a biased router, the renormalised softmax top-k, routed experts of
    intermediate_size alone, none of DeepSeek's options."""
    expected = {**SOFTMAX_TOP_K, "renormalize": True, "router_bias": True, "expert_d_ff": None}
    return moe_option_misfits(spec, expected, "gpt-oss's biased router renormalises a softmax top-k over routed "
                                               "experts of intermediate_size")


TABLE = llama_like.BASE.but(
    llama_like.kv_heads(8), llama_like.head_dim(64), llama_like.rms_norm_eps(1e-5), llama_like.rope_key(_positional),
    Key(name="hidden_act", read=_activation, write=_activation_json, expresses={"activations": ("clamped_swiglu",)}),
    Key(name="attention_bias", read=_attention_bias, write=lambda spec: {"attention_bias": biases(spec)[0]},
        expresses={"biases": "attention_bias_and_mlp"}),
    Key(name="sliding_window", read=_read_windows, write=_write_windows, expresses={"windows": "per_layer"}),
    mapped("num_local_experts", "ffn.n_experts", int, 128, ffn="moe"),
    mapped("num_experts_per_tok", "ffn.top_k", int, 4),
    Key(name="experts_per_token", read=_experts_per_token),
    mapped("router_aux_loss_coef", "ffn.aux_loss_coef", float, 0.001),  # training only, as Mixtral's
    accepted("output_router_logits"), accepted("initial_context_length"),  # the original context YaRN reads
    Key(name="quantization_config", read=_refuse_quantization, misfits=_routing_misfits),
    frame={"model": {"norm_placement": "pre", "bias": True}, "attention": {"use": "causal", "sinks": True},
           "ffn": {"use": "moe", "renormalize": True, "router_bias": True}},
    sinks=True,
)


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec) -> list[Rule]:
    return llama_like.rules(spec, attention=_attention, mlp=_experts)


def _attention(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    return [*llama_like.attention_rules(spec, ours, theirs), same(f"{ours}.sinks", f"{theirs}.sinks")]


def _experts(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    """The router and the stacked experts: gate_up_proj (E, d, 2·d_ff) transposed and de-interleaved into up
    (E, 2·d_ff, d), its bias de-interleaved, down_proj (E, d_ff, d) transposed into down (E, d, d_ff)."""
    experts = f"{theirs}.experts"
    return [same(f"{ours}.router.weight", f"{theirs}.router.weight"),
            same(f"{ours}.router.bias", f"{theirs}.router.bias"),
            interleaved(f"{ours}.up", f"{experts}.gate_up_proj", -2, transpose=True),
            interleaved(f"{ours}.up_bias", f"{experts}.gate_up_proj_bias", -1),
            same(f"{ours}.down", f"{experts}.down_proj", transpose=True),
            same(f"{ours}.down_bias", f"{experts}.down_proj_bias")]


FAMILY = table_family(name="gpt_oss", title="gpt-oss", architecture=ARCHITECTURE, model_type="gpt_oss",
                      table=TABLE, rules=rules, layer_index=llama_like.LAYER_INDEX, ignored=llama_like.ignored)
