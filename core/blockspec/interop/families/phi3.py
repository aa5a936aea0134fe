"""Phi-3 (Phi3ForCausalLM): config.json keys, export checks and weight names.

Phi-3 is Llama's layer with blockspec's own fusions: ``qkv_proj`` is q|k|v and ``gate_up_proj``
is gate|up, as blockspec's qkv and ffn.up, so every weight maps as it is. It adds a sliding
window, partial RoPE (``partial_rotary_factor``, Phi-4-mini) and no biases anywhere. The long
context variants' RoPE scaling, ``longrope`` (which Phi-3 also reads for 'su' and 'yarn'), has
no blockspec equivalent and is refused by name.
"""

from __future__ import annotations

import re
from typing import Any

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader, rope, rope_json
from blockspec.interop.families.gpt_neox import check_rotary_width
from blockspec.interop.family import Family, common_misfits, tied_head_copy
from blockspec.interop.weight_map import Rule, same

ARCHITECTURE = "Phi3ForCausalLM"
IGNORED = re.compile(r"\.rotary_emb\.inv_freq$")  # a buffer older transformers versions saved
LAYER_INDEX = r"^model\.layers\.(\d+)\."
LONGROPE = ("longrope", "su", "yarn")  # Phi3Config turns 'su' and 'yarn' into 'longrope'


# ---------------------------------------------------------------- config.json -> spec


def spec_dict(r: ConfigReader, name: str) -> dict[str, Any]:
    d_model, n_heads = r.get("hidden_size", int), r.get("num_attention_heads", int)
    silu_only(r)
    # embedding and attention dropout: training only, blockspec's one rate is resid_pdrop; attention_bias:
    # Phi3ForCausalLM builds no biases whatever it says; original_max_position_embeddings: read only by
    # longrope, which _positional refuses
    r.accept("embd_pdrop", "attention_dropout", "attention_bias", "original_max_position_embeddings")
    model = {
        "name": name, "vocab_size": r.get("vocab_size", int), "d_model": d_model,
        "context_length": r.get("max_position_embeddings", int), "n_layers": r.get("num_hidden_layers", int),
        "n_heads": n_heads, "n_kv_heads": r.get("num_key_value_heads", int, n_heads),
        "d_ff": r.get("intermediate_size", int), "bias": False, "norm_placement": "pre",
        "dropout": r.get("resid_pdrop", float, 0.0), **head_dim(r, d_model, n_heads),
    }
    return {
        "model": model, "positional": _positional(r, model.get("head_dim") or _plain_head_dim(d_model, n_heads)),
        "norm": {"use": "rmsnorm", "eps": r.get("rms_norm_eps", float, 1e-5)},
        "activation": {"use": "swiglu"}, "attention": {"use": "causal", **window(r)},
        "head": {"use": "lm", "tied": r.get("tie_word_embeddings", bool, False)},
    }


def silu_only(r: ConfigReader) -> None:
    act = r.get("hidden_act", str, "silu")
    if act not in ("silu", "swish", None):
        r.problem("hidden_act", f"unsupported activation {act!r}", "blockspec's swiglu gates with silu")


def head_dim(r: ConfigReader, d_model: int | None, n_heads: int | None) -> dict[str, int]:
    """[model] head_dim, when config.json gives one other than hidden_size / num_attention_heads."""
    given = r.get("head_dim", int, None)
    if given is None or (d_model and n_heads and given == d_model // n_heads):
        return {}
    return {"head_dim": given}


def window(r: ConfigReader) -> dict[str, int]:
    """[attention] sliding_window: each query sees the last w positions, its own included, as in transformers'
    sliding-window mask (kv > q - w)."""
    size = r.get("sliding_window", int, None)
    return {} if size is None else {"sliding_window": size}


def _plain_head_dim(d_model: int | None, n_heads: int | None) -> int | None:
    return d_model // n_heads if d_model and n_heads else None


def _fraction_key(r: ConfigReader) -> str:
    """Where the rotated fraction rope(r) used was written: rope_parameters' first, else the top level."""
    parameters = r.config.get("rope_parameters")
    inside = isinstance(parameters, dict) and parameters.get("partial_rotary_factor") is not None
    return "rope_parameters.partial_rotary_factor" if inside else "partial_rotary_factor"


def _positional(r: ConfigReader, head_dim: int | None) -> dict[str, Any]:
    if _scaled(r):
        r.accept("rope_theta", "partial_rotary_factor")  # the rope is refused as a whole: no second problem
        return {"use": "rope"}
    positional = rope(r)
    top_level_fraction(r, positional.get("fraction", 1.0))
    check_rotary_width(r, _fraction_key(r), head_dim, positional.get("fraction", 1.0))
    return positional


def _scaled(r: ConfigReader) -> bool:
    """Refuse the RoPE scaling types Phi3Config takes (longrope) or rejects (any other); True if any is set."""
    kinds = {key: _kind(r.table(key)) for key in ("rope_scaling", "rope_parameters")}
    for key, kind in kinds.items():
        if kind in LONGROPE:
            r.problem(f"{key}.rope_type", f"RoPE scaling {kind!r} (Phi-3 reads it as 'longrope') is not supported",
                      "blockspec's rope has no longrope (per-frequency factors switched at a length)")
        elif kind != "default":
            r.problem(f"{key}.rope_type", f"RoPE scaling {kind!r} is not one Phi-3 has",
                      "transformers' Phi-3 takes 'default' or 'longrope' only")
    return set(kinds.values()) != {"default"}


def top_level_fraction(r: ConfigReader, used: float) -> None:
    """A top-level partial_rotary_factor (transformers 4's place) that rope(r) skipped for rope_parameters'
    (transformers 5's): refused unless the two agree."""
    top = r.get("partial_rotary_factor", float, None)
    if top is not None and top != used:
        r.problem("partial_rotary_factor", f"{top} differs from rope_parameters.partial_rotary_factor = {used}",
                  "transformers 5 reads rope_parameters, transformers 4 this: keep one")


def _kind(table: dict[str, Any] | None) -> str:
    return table.get("rope_type", table.get("type", "default")) if table else "default"


# ---------------------------------------------------------------- spec -> config.json


def without(problems: list[str], *starts: str) -> list[str]:
    """common_misfits' problems less those a family can express (by their opening words)."""
    return [p for p in problems if not p.startswith(starts)]


def llama_like_misfits(spec: ModelSpec, *allowed: str) -> list[str]:
    """common_misfits less ``allowed`` (sliding window, head_dim...), plus rope (half layout with a fraction:
    the interleaved-to-half export permutes whole heads), RMSNorm, SwiGLU and no biases at all."""
    problems = without(common_misfits(spec), "[attention] sliding_window", "[model] head_dim", *allowed)
    positional = spec.positional
    if positional.name != "rope":
        problems.append(f"positional is {positional.name!r}, expected 'rope'")
    elif getattr(positional.config, "fraction", 1.0) != 1.0 and positional.config.layout != "half":
        problems.append("[positional] layout = 'interleaved' with a fraction: expected the half layout")
    if spec.norm.name != "rmsnorm":
        problems.append(f"norm is {spec.norm.name!r}, expected 'rmsnorm'")
    if spec.activation.name != "swiglu":
        problems.append(f"activation is {spec.activation.name!r}, expected 'swiglu'")
    if spec.model.bias:
        problems.append("[model] bias = true: the family has no biases")
    return problems


def misfits(spec: ModelSpec) -> list[str]:
    return llama_like_misfits(spec, "[positional] fraction")


def attention_json(spec: ModelSpec) -> dict[str, Any]:
    """The config.json keys of [model] head_dim (only when given) and [attention] sliding_window."""
    m = spec.model
    keys: dict[str, Any] = {"sliding_window": getattr(spec.attention.config, "sliding_window", None)}
    if m.given_head_dim is not None and m.given_head_dim != m.d_model // m.n_heads:
        keys["head_dim"] = m.given_head_dim
    return keys


def _rope_json(spec: ModelSpec) -> dict[str, Any]:
    """rope_json, and the rotated fraction at the top level too, where transformers 4 reads it (Phi-4-mini)."""
    keys, fraction = rope_json(spec.positional.config), getattr(spec.positional.config, "fraction", 1.0)
    return {**keys, "partial_rotary_factor": fraction} if fraction != 1.0 else keys


def config_json(spec: ModelSpec) -> dict[str, Any]:
    m = spec.model
    return {
        "architectures": [ARCHITECTURE], "model_type": "phi3", "vocab_size": m.vocab_size,
        "hidden_size": m.d_model, "intermediate_size": m.d_ff, "num_hidden_layers": m.n_layers,
        "num_attention_heads": m.n_heads, "num_key_value_heads": m.kv_heads, "hidden_act": "silu",
        "max_position_embeddings": m.context_length, "original_max_position_embeddings": m.context_length,
        "rms_norm_eps": spec.norm.config.eps, **_rope_json(spec), **attention_json(spec),
        "attention_bias": False, "resid_pdrop": m.dropout, "embd_pdrop": m.dropout,
        "attention_dropout": m.dropout, "tie_word_embeddings": spec.head.config.tied,
    }


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec) -> list[Rule]:
    found = [same("embedding.weight", "model.embed_tokens.weight"), same("final_norm.weight", "model.norm.weight")]
    for i in range(spec.model.n_layers):
        ours, theirs = f"blocks.{i}", f"model.layers.{i}"
        found += [same(f"{ours}.norm1.weight", f"{theirs}.input_layernorm.weight"),
                  same(f"{ours}.attn.qkv.weight", f"{theirs}.self_attn.qkv_proj.weight"),  # q|k|v both sides
                  same(f"{ours}.attn.proj.weight", f"{theirs}.self_attn.o_proj.weight"),
                  same(f"{ours}.norm2.weight", f"{theirs}.post_attention_layernorm.weight"),
                  same(f"{ours}.ffn.up.weight", f"{theirs}.mlp.gate_up_proj.weight"),  # gate|up both sides
                  same(f"{ours}.ffn.down.weight", f"{theirs}.mlp.down_proj.weight")]
    if not spec.head.config.tied:
        found.append(same("head.weight", "lm_head.weight"))
    return found


def ignored(name: str, spec: ModelSpec) -> bool:
    return bool(IGNORED.search(name)) or tied_head_copy(name, spec)


FAMILY = Family(
    name="phi3", title="Phi-3", architectures={ARCHITECTURE: "phi3"}, spec_dict=spec_dict, misfits=misfits,
    config_json=config_json, rules=rules, layer_index=LAYER_INDEX, ignored=ignored,
)
