"""litgpt Config -> blockspec spec: the converter behind benchmarks/litgpt_coverage.py.

It reads litgpt 0.5.13's Config fields with litgpt/model.py's semantics (what GPT actually builds), and
writes the spec as TOML text for blockspec's public loader. A field it cannot express raises Unsupported
naming the field and value: an honest failure, never an approximation.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any

import tomli_w

SPEC_FIELDS_IGNORED = ("name", "hf_config", "vocab_size", "padding_multiple", "rope_interleave")


class Unsupported(Exception):
    """A litgpt setting that no blockspec option expresses: the message names both."""


def import_litgpt(root: Path) -> tuple[types.ModuleType, types.ModuleType]:
    """litgpt.config and litgpt.model from an unpacked wheel, without running litgpt/__init__.py.

    The package's __init__ pulls in lightning; model.py needs only torch, config and qkv_reassemble (used
    solely to load legacy checkpoints), so that one module is a stub that refuses.
    """
    base = Path(root) / "litgpt"
    if not (base / "config.py").is_file():
        raise FileNotFoundError(f"{root}: no litgpt/config.py (unpack the litgpt wheel there)")
    loaded = sys.modules.get("litgpt.model")
    if loaded is not None and Path(str(loaded.__file__)).parent == base:
        return sys.modules["litgpt.config"], loaded
    for name, path in (("litgpt", base), ("litgpt.scripts", base / "scripts")):
        package = types.ModuleType(name)
        package.__path__ = [str(path)]
        sys.modules[name] = package
    stub = types.ModuleType("litgpt.scripts.convert_hf_checkpoint")
    stub.qkv_reassemble = _legacy_only  # type: ignore[attr-defined]
    sys.modules[stub.__name__] = stub
    config, model = importlib.import_module("litgpt.config"), importlib.import_module("litgpt.model")
    sys.modules["litgpt"].config, sys.modules["litgpt"].model = config, model  # type: ignore[attr-defined]
    return config, model


def _legacy_only(*args: object, **kwargs: object) -> None:
    raise NotImplementedError("qkv_reassemble: legacy litgpt checkpoints are not loaded here")


def convert(config: Any) -> str:
    """A litgpt Config (after __post_init__) -> the TOML text of the equivalent blockspec spec."""
    _refuse_unsupported(config)
    spec: dict[str, Any] = {
        "model": model_table(config), "block": block_table(config), "positional": positional_table(config, 0),
        "norm": norm_table(config), "activation": activation_table(config), "head": head_table(config),
    }
    layer_attention = [attention_table(config, i) for i in range(config.n_layer)]
    layer_positional = [positional_table(config, i) for i in range(config.n_layer)]
    spec["attention"], spec["positional"], layers = _per_layer(layer_attention, layer_positional)
    if config.mlp_class_name == "LLaMAMoE":
        spec["ffn"] = moe_table(config)
    if layers:
        spec["layers"] = layers
    return tomli_w.dumps(spec)


def _refuse_unsupported(config: Any) -> None:
    """Fields whose non-default values have no blockspec counterpart here (none of 0.5.13's configs sets them)."""
    unset = ("latent_attention", "n_shared_expert", "n_expert_groups", "first_k_dense_replace")
    for name in unset:
        if getattr(config, name, None):
            raise Unsupported(f"{name} = {getattr(config, name)!r}: not mapped by this converter")
    if config.rope_interleave:
        raise Unsupported("rope_interleave = True: litgpt de-interleaves before a half rotation; not mapped")
    if config.routed_scaling_factor != 1.0 or config.norm_topk_prob:
        raise Unsupported("routed_scaling_factor/norm_topk_prob: only used with grouped routing; not mapped")
    if not config.parallel_residual and config.shared_attention_norm:
        raise Unsupported("shared_attention_norm without parallel_residual: litgpt's GPT refuses it too")


def model_table(config: Any) -> dict[str, Any]:
    """[model]: sizes; litgpt's embedding and head are padded_vocab_size wide."""
    table: dict[str, Any] = {
        "name": config.name, "vocab_size": config.padded_vocab_size, "context_length": config.block_size,
        "d_model": config.n_embd, "n_layers": config.n_layer, "n_heads": config.n_head,
        "n_kv_heads": config.n_query_groups, "head_dim": config.head_size, "d_ff": config.intermediate_size,
        "bias": config.bias,
    }
    if config.scale_embeddings:
        table["embedding_scale"] = "sqrt_d"  # x * n_embd ** 0.5
    return table


def block_table(config: Any) -> dict[str, Any]:
    """litgpt's Block: norm_1/norm_2 before, post_attention_norm/post_mlp_norm after, parallel or not."""
    pre, post = (config.norm_1, config.norm_2), (config.post_attention_norm, config.post_mlp_norm)
    if pre[0] != pre[1] or post[0] != post[1]:
        raise Unsupported(f"norm_1/norm_2 = {pre}, post norms = {post}: blockspec's blocks put a norm before "
                          "(or after) both sublayers or neither")
    if config.parallel_residual:
        if post[0] or not pre[0]:
            raise Unsupported("parallel_residual with post norms or without norm_1: no parallel block option")
        return {"use": "parallel", "shared_norm": bool(config.shared_attention_norm)}
    if pre[0] and post[0]:
        return {"use": "sandwich"}
    if post[0]:
        return {"use": "output_norm"}
    if pre[0]:
        return {"use": "pre"}
    raise Unsupported("norm_1 = norm_2 = False without post norms: no block without norms")


def norm_class(config: Any) -> tuple[str, bool]:
    """Config.norm_class: RMSNorm scales by (1 + w) when 'Gemma' is in the name; OLMo's LayerNorm has no affine."""
    if config.norm_class_name == "RMSNorm":
        return "rmsnorm", "Gemma" in config.name
    if config.norm_class_name == "LayerNorm":
        return "layernorm", "OLMo" in config.name
    raise Unsupported(f"norm_class_name = {config.norm_class_name!r}")


def norm_table(config: Any) -> dict[str, Any]:
    """[norm]: every norm of the model, ln_f included, is Config.norm_class(n_embd, eps=norm_eps)."""
    kind, special = norm_class(config)
    if kind == "rmsnorm":
        return {"use": "rmsnorm", "eps": config.norm_eps, "offset": special}
    return {"use": "layernorm", "eps": config.norm_eps, "elementwise_affine": not special}


def activation_table(config: Any) -> dict[str, Any]:
    """GptNeoxMLP: gelu; LLaMAMLP and LLaMAMoE's experts: silu(fc_1) * fc_2; GemmaMLP: gelu(fc_1) * fc_2."""
    name = config.mlp_class_name
    if name == "GptNeoxMLP":
        return {"use": "gelu", "approximate": config.gelu_approximate}
    if name in ("LLaMAMLP", "LLaMAMoE"):
        return {"use": "swiglu"}
    if name == "GemmaMLP":
        return {"use": "geglu", "approximate": config.gelu_approximate}
    raise Unsupported(f"mlp_class_name = {name!r}")


def moe_table(config: Any) -> dict[str, Any]:
    """LLaMAMoE: softmax over the top-k router logits (= renormalised top-k), no router bias, no aux loss."""
    width = config.moe_intermediate_size or config.intermediate_size
    return {"use": "moe", "n_experts": config.n_expert, "top_k": config.n_expert_per_token, "renormalize": True,
            "expert_d_ff": width, "aux_loss_coef": 0.0}


def head_table(config: Any) -> dict[str, Any]:
    """GPT's lm_head is its own nn.Linear, never tied to wte (a tied checkpoint is copied into both)."""
    table: dict[str, Any] = {"use": "lm", "tied": False, "bias": config.lm_head_bias}
    if config.final_logit_softcapping is not None:
        table["logit_softcap"] = float(config.final_logit_softcapping)
    return table


def attention_table(config: Any, layer: int) -> dict[str, Any]:
    """CausalSelfAttention of one layer: qkv bias = bias or attn_bias, proj bias = bias, q/k norms, scale, window."""
    table: dict[str, Any] = {"use": "causal"}
    if config.attn_bias and not config.bias:
        table.update(qkv_bias=True, out_bias=False)
    if config.norm_qk:
        table.update(_qk_norm(config))
    if config.attention_logit_softcapping is not None:
        table["logit_softcap"] = float(config.attention_logit_softcapping)
    if config.attention_scores_scalar:
        table["query_scale"] = config.attention_scores_scalar ** -0.5  # 1 / sqrt(attention_scores_scalar)
    if config.sliding_window_size is not None and config.sliding_window_indices[layer]:
        table["sliding_window"] = config.sliding_window_size
    return table


def _qk_norm(config: Any) -> dict[str, Any]:
    """norm_q/norm_k are Config.norm_class with norm_eps: over each head ("default") or all heads ("olmo2")."""
    kind, offset = norm_class(config)
    if kind != "rmsnorm":
        raise Unsupported(f"norm_qk with norm_class_name = {config.norm_class_name!r}: blockspec's q/k norms "
                          "are RMSNorms")
    table: dict[str, Any] = {"qk_norm": "all" if config.norm_qk_type == "olmo2" else "head",
                             "qk_norm_eps": config.norm_eps}
    if offset:
        table["qk_norm_offset"] = True
    return table


def positional_table(config: Any, layer: int) -> dict[str, Any]:
    """GPT.rope_cache for one layer: rope_n_elem features, the global base (with rope_adjustments) or the local one."""
    table: dict[str, Any] = {"use": "rope", "base": float(config.rope_base)}
    if config.rope_n_elem != config.head_size:
        if config.rope_n_elem % 2 or config.rope_n_elem < 2:
            raise Unsupported(f"rope_n_elem = {config.rope_n_elem} (rotary_percentage {config.rotary_percentage}): "
                              "blockspec rotates an even number of features")
        table["fraction"] = config.rope_n_elem / config.head_size
    if config.rope_local_base_freq is not None and config.rope_indices[layer]:
        return {**table, "base": float(config.rope_local_base_freq)}  # litgpt: plain RoPE for the local layers
    return {**table, **_rope_scaling(config)}


def _rope_scaling(config: Any) -> dict[str, Any]:
    """rope_condense_ratio (positions / ratio) and rope_adjustments (llama3 bands or a linear factor)."""
    adjust, ratio = config.rope_adjustments, config.rope_condense_ratio
    if ratio != 1 and adjust:
        raise Unsupported(f"rope_condense_ratio = {ratio} with rope_adjustments: two scalings at once")
    if ratio != 1:
        return {"scaling": "linear", "factor": float(ratio)}
    if not adjust:
        return {}
    if "beta_fast" in adjust or "beta_slow" in adjust:
        raise Unsupported(f"rope_adjustments = {adjust!r} (YaRN with litgpt's mscale): not mapped")
    if "low_freq_factor" in adjust or "high_freq_factor" in adjust:
        return {"scaling": "llama3", "factor": float(adjust["factor"]),
                "original_context_length": int(adjust["original_max_seq_len"]),
                "low_freq_factor": float(adjust["low_freq_factor"]),
                "high_freq_factor": float(adjust["high_freq_factor"])}
    if "factor" in adjust:
        return {"scaling": "linear", "factor": float(adjust["factor"])}
    return {}


def _per_layer(attention: list[dict[str, Any]], positional: list[dict[str, Any]]) -> tuple[Any, Any, list[Any]]:
    """The commonest (attention, positional) pair model-wide; each other pair one [[layers]] entry by index."""
    keys = [(tomli_w.dumps(a), tomli_w.dumps(p)) for a, p in zip(attention, positional)]
    common = Counter(keys).most_common(1)[0][0]
    base = keys.index(common)
    layers: list[dict[str, Any]] = []
    for key in dict.fromkeys(k for k in keys if k != common):
        entry: dict[str, Any] = {"index": [i for i, k in enumerate(keys) if k == key]}
        first = entry["index"][0]
        if key[0] != common[0]:
            entry["attention"] = attention[first]
        if key[1] != common[1]:
            entry["positional"] = positional[first]
        layers.append(entry)
    return attention[base], positional[base], layers
