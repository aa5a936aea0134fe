"""Llama family (LlamaForCausalLM, MistralForCausalLM): config.json keys, export checks, weight names.

blockspec fuses q|k|v into one Linear (qkv) and gate|up into one (ffn.up, gate first, as
SwiGLU chunks it); Hugging Face keeps them separate. RoPE uses the "half" layout on both
sides, so q and k need no permutation.
"""

from __future__ import annotations

import re
from typing import Any

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader, rope, rope_json
from blockspec.interop.family import Family, common_misfits, tied_head_copy
from blockspec.interop.weight_map import Rule, same, stacked

LLAMA = "LlamaForCausalLM"
MISTRAL = "MistralForCausalLM"
IGNORED = re.compile(r"\.rotary_emb\.inv_freq$")  # a buffer older transformers versions saved
LAYER_INDEX = r"^model\.layers\.(\d+)\."


# ---------------------------------------------------------------- config.json -> spec


def spec_dict(r: ConfigReader, name: str) -> dict[str, Any]:
    d_model, n_heads = r.get("hidden_size", int), r.get("num_attention_heads", int)
    attention_bias, mlp_bias = r.get("attention_bias", bool, False), r.get("mlp_bias", bool, False)
    if attention_bias != mlp_bias:
        r.problem("mlp_bias", f"attention_bias = {attention_bias} but mlp_bias = {mlp_bias}",
                  "blockspec has one bias flag for attention and FFN linears")
    _refusals(r, d_model, n_heads)
    positional = rope(r)
    if "fraction" in positional:
        r.problem("partial_rotary_factor", f"partial RoPE (factor {positional.pop('fraction')}) is not supported",
                  "the Llama family rotates every feature; expected 1.0")
    r.accept("pretraining_tp")  # splits the matmuls of a tensor-parallel run into slices: the same sums
    model = {
        "name": name, "vocab_size": r.get("vocab_size", int), "d_model": d_model,
        "context_length": r.get("max_position_embeddings", int),
        "n_layers": r.get("num_hidden_layers", int), "n_heads": n_heads,
        "n_kv_heads": r.get("num_key_value_heads", int, n_heads), "d_ff": r.get("intermediate_size", int),
        "bias": attention_bias, "norm_placement": "pre", "dropout": r.get("attention_dropout", float, 0.0),
    }
    return {
        "model": model, "positional": positional,
        "norm": {"use": "rmsnorm", "eps": r.get("rms_norm_eps", float, 1e-6)},
        "activation": {"use": "swiglu"},
        "head": {"use": "lm", "tied": r.get("tie_word_embeddings", bool, False)},
        "attention": {"use": "causal"},
    }


def _refusals(r: ConfigReader, d_model: int | None, n_heads: int | None) -> None:
    act = r.get("hidden_act", str, "silu")
    if act not in ("silu", "swish", None):
        r.problem("hidden_act", f"unsupported activation {act!r}", "blockspec's swiglu gates with silu")
    head_dim = r.get("head_dim", int, None)
    if head_dim is not None and d_model and n_heads and head_dim != d_model // n_heads:
        r.problem("head_dim", f"expected hidden_size / num_attention_heads = {d_model // n_heads}, found {head_dim}",
                  "blockspec derives head_dim from d_model and n_heads")
    window, max_positions = r.get("sliding_window", int, None), r.get("max_position_embeddings", int, None)
    if window is not None and r.get("use_sliding_window", bool, True) and max_positions and window < max_positions:
        r.problem("sliding_window", f"sliding-window attention ({window} < max_position_embeddings = "
                  f"{max_positions}) is not supported", "blockspec attention is full causal attention")


# ---------------------------------------------------------------- spec -> config.json


def misfits(spec: ModelSpec) -> list[str]:
    problems = common_misfits(spec)
    if spec.positional.name != "rope":
        problems.append(f"positional is {spec.positional.name!r}, expected 'rope'")
    if spec.norm.name != "rmsnorm":
        problems.append(f"norm is {spec.norm.name!r}, expected 'rmsnorm'")
    if spec.activation.name != "swiglu":
        problems.append(f"activation is {spec.activation.name!r}, expected 'swiglu'")
    return problems


def config_json(spec: ModelSpec) -> dict[str, Any]:
    m = spec.model
    return {
        "architectures": [LLAMA], "model_type": "llama", "vocab_size": m.vocab_size, "hidden_size": m.d_model,
        "intermediate_size": m.d_ff, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
        "num_key_value_heads": m.kv_heads, "head_dim": m.head_dim, "hidden_act": "silu",
        "max_position_embeddings": m.context_length, "rms_norm_eps": spec.norm.config.eps,
        **rope_json(spec.positional.config),
        "attention_bias": m.bias, "mlp_bias": m.bias, "attention_dropout": m.dropout,
        "tie_word_embeddings": spec.head.config.tied,
    }


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec) -> list[Rule]:
    cfg = spec.model
    found = [same("embedding.weight", "model.embed_tokens.weight"), same("final_norm.weight", "model.norm.weight")]
    for i in range(cfg.n_layers):
        found += _block(spec, i)
    if not spec.head.config.tied:
        found.append(same("head.weight", "lm_head.weight"))
    return found


def _block(spec: ModelSpec, i: int) -> list[Rule]:
    cfg = spec.model
    ours, theirs = f"blocks.{i}", f"model.layers.{i}"
    kv_width = cfg.kv_heads * cfg.head_dim
    qkv_sizes = (cfg.d_model, kv_width, kv_width)
    suffixes = ("weight", "bias") if cfg.bias else ("weight",)
    found = [same(f"{ours}.norm1.weight", f"{theirs}.input_layernorm.weight"),
             same(f"{ours}.norm2.weight", f"{theirs}.post_attention_layernorm.weight")]
    for suffix in suffixes:
        attn = [f"{theirs}.self_attn.{p}_proj.{suffix}" for p in "qkv"]
        found += [
            stacked(f"{ours}.attn.qkv.{suffix}", attn, qkv_sizes),
            same(f"{ours}.attn.proj.{suffix}", f"{theirs}.self_attn.o_proj.{suffix}"),
            stacked(f"{ours}.ffn.up.{suffix}", [f"{theirs}.mlp.gate_proj.{suffix}", f"{theirs}.mlp.up_proj.{suffix}"],
                    (cfg.d_ff, cfg.d_ff)),
            same(f"{ours}.ffn.down.{suffix}", f"{theirs}.mlp.down_proj.{suffix}"),
        ]
    return found


def ignored(name: str, spec: ModelSpec) -> bool:
    return bool(IGNORED.search(name)) or tied_head_copy(name, spec)


FAMILY = Family(
    name="llama", title="Llama", architectures={LLAMA: "llama", MISTRAL: "mistral"}, spec_dict=spec_dict,
    misfits=misfits, config_json=config_json, rules=rules, layer_index=LAYER_INDEX, ignored=ignored,
)
