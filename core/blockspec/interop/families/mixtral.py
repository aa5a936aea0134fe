"""Mixtral (MixtralForCausalLM): config.json keys, export checks and weight names.

Mistral's attention (separate q, k, v, as Llama) with every FFN a sparse mixture of SwiGLU
experts, blockspec-moe's ``ffn:moe``: the router (``gate``) scores the experts, a softmax picks
the top ``num_experts_per_tok``, whose weights are renormalised to sum to 1, as blockspec's
``renormalize = true``. The files keep each expert apart (``block_sparse_moe.experts.j.w1/w2/w3``,
as transformers 5 still saves them; it fuses them only in memory); blockspec stacks them:
``up`` (E, 2·d_ff, d) is each expert's w1 then w3, ``down`` (E, d, d_ff) its w2.
"""

from __future__ import annotations

import re
from typing import Any

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader, rope, rope_json
from blockspec.interop.families.phi3 import (attention_json, head_dim, llama_like_misfits, silu_only,
                                             top_level_fraction, window)
from blockspec.interop.family import Family, tied_head_copy
from blockspec.interop.weight_map import Rule, per_expert, same, stacked

ARCHITECTURE = "MixtralForCausalLM"
IGNORED = re.compile(r"\.rotary_emb\.inv_freq$")  # a buffer older transformers versions saved
LAYER_INDEX = r"^model\.layers\.(\d+)\."
DEFAULT_BASE = 1e6  # MixtralConfig's rope_theta when config.json gives none


# ---------------------------------------------------------------- config.json -> spec


def spec_dict(r: ConfigReader, name: str) -> dict[str, Any]:
    d_model, n_heads = r.get("hidden_size", int), r.get("num_attention_heads", int)
    silu_only(r)
    model = {
        "name": name, "vocab_size": r.get("vocab_size", int), "d_model": d_model,
        "context_length": r.get("max_position_embeddings", int), "n_layers": r.get("num_hidden_layers", int),
        "n_heads": n_heads, "n_kv_heads": r.get("num_key_value_heads", int, n_heads),
        "d_ff": r.get("intermediate_size", int), "bias": False, "norm_placement": "pre",
        "dropout": r.get("attention_dropout", float, 0.0), **head_dim(r, d_model, n_heads),
    }
    return {
        "model": model, "positional": _positional(r),
        "norm": {"use": "rmsnorm", "eps": r.get("rms_norm_eps", float, 1e-5)},
        "activation": {"use": "swiglu"}, "attention": {"use": "causal", **window(r)}, "ffn": _moe(r),
        "head": {"use": "lm", "tied": r.get("tie_word_embeddings", bool, False)},
    }


def _moe(r: ConfigReader) -> dict[str, Any]:
    """The [ffn] table; router_jitter_noise, multiplicative noise on the router's input while training, has no
    blockspec counterpart: refused unless 0, so that fine-tuning the import trains what the original would."""
    jitter = r.get("router_jitter_noise", float, 0.0)
    if jitter:
        r.problem("router_jitter_noise", f"router jitter ({jitter}) is not supported",
                  "blockspec-moe adds no noise while training; set it to 0.0 (eval logits do not depend on it)")
    # router_aux_loss_coef weighs the load-balancing loss in training only; transformers adds it only with
    # output_router_logits and over all layers at once, blockspec-moe per layer, summed
    return {"use": "moe", "n_experts": r.get("num_local_experts", int, 8),
            "top_k": r.get("num_experts_per_tok", int, 2), "renormalize": True,
            "aux_loss_coef": r.get("router_aux_loss_coef", float, 0.001)}


def _positional(r: ConfigReader) -> dict[str, Any]:
    positional = rope(r)
    parameters = r.config.get("rope_parameters")
    in_table = isinstance(parameters, dict) and parameters.get("rope_theta") is not None
    if not in_table and r.config.get("rope_theta") is None:
        positional["base"] = DEFAULT_BASE
    fraction = positional.pop("fraction", 1.0)
    top_level_fraction(r, fraction)
    if fraction != 1.0:
        r.problem("partial_rotary_factor", f"partial RoPE (factor {fraction}) is not supported",
                  "Mixtral rotates every feature; expected 1.0")
    return positional


# ---------------------------------------------------------------- spec -> config.json


def misfits(spec: ModelSpec) -> list[str]:
    """Llama-like (with a sliding window and head_dim), and blockspec-moe's ffn as Mixtral routes."""
    problems = llama_like_misfits(spec, "ffn is")
    ffn = spec.ffn
    if ffn.name != "moe" or ffn.distribution not in (None, "blockspec-moe"):
        return problems + [f"ffn is {ffn.use!r}, expected blockspec-moe's 'moe'"]
    moe = ffn.config
    if not moe.renormalize or moe.n_shared_experts or moe.expert_d_ff not in (None, spec.model.d_ff):
        problems.append("[ffn] expected renormalize = true, no shared experts and expert_d_ff = d_ff: Mixtral "
                        "renormalises the top-k weights and has only routed experts of intermediate_size")
    return problems


def config_json(spec: ModelSpec) -> dict[str, Any]:
    m, moe = spec.model, spec.ffn.config
    return {
        "architectures": [ARCHITECTURE], "model_type": "mixtral", "vocab_size": m.vocab_size,
        "hidden_size": m.d_model, "intermediate_size": m.d_ff, "num_hidden_layers": m.n_layers,
        "num_attention_heads": m.n_heads, "num_key_value_heads": m.kv_heads, "hidden_act": "silu",
        "max_position_embeddings": m.context_length, "rms_norm_eps": spec.norm.config.eps,
        **rope_json(spec.positional.config), **attention_json(spec), "attention_dropout": m.dropout,
        "num_local_experts": moe.n_experts, "num_experts_per_tok": moe.top_k,
        "router_aux_loss_coef": moe.aux_loss_coef, "router_jitter_noise": 0.0,
        "tie_word_embeddings": spec.head.config.tied,
    }


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec) -> list[Rule]:
    found = [same("embedding.weight", "model.embed_tokens.weight"), same("final_norm.weight", "model.norm.weight")]
    for i in range(spec.model.n_layers):
        found += _block(spec, i)
    if not spec.head.config.tied:
        found.append(same("head.weight", "lm_head.weight"))
    return found


def _block(spec: ModelSpec, i: int) -> list[Rule]:
    m, ours, theirs = spec.model, f"blocks.{i}", f"model.layers.{i}"
    kv_width = m.kv_heads * m.head_dim
    attn = [f"{theirs}.self_attn.{p}_proj.weight" for p in "qkv"]
    moe = f"{theirs}.block_sparse_moe"
    experts = range(spec.ffn.config.n_experts)
    return [
        same(f"{ours}.norm1.weight", f"{theirs}.input_layernorm.weight"),
        stacked(f"{ours}.attn.qkv.weight", attn, (m.n_heads * m.head_dim, kv_width, kv_width)),
        same(f"{ours}.attn.proj.weight", f"{theirs}.self_attn.o_proj.weight"),
        same(f"{ours}.norm2.weight", f"{theirs}.post_attention_layernorm.weight"),
        same(f"{ours}.ffn.router.weight", f"{moe}.gate.weight"),
        per_expert(f"{ours}.ffn.up", [(f"{moe}.experts.{e}.w1.weight", f"{moe}.experts.{e}.w3.weight")
                                      for e in experts], (m.d_ff, m.d_ff)),  # (E, 2·d_ff, d): gate w1, then w3
        per_expert(f"{ours}.ffn.down", [(f"{moe}.experts.{e}.w2.weight",) for e in experts]),  # (E, d, d_ff)
    ]


def ignored(name: str, spec: ModelSpec) -> bool:
    return bool(IGNORED.search(name)) or tied_head_copy(name, spec)


FAMILY = Family(
    name="mixtral", title="Mixtral", architectures={ARCHITECTURE: "mixtral"}, spec_dict=spec_dict,
    misfits=misfits, config_json=config_json, rules=rules, layer_index=LAYER_INDEX, ignored=ignored,
)
