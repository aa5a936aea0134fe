"""Phi-1, Phi-1.5 and Phi-2 (PhiForCausalLM): its config.json keys (one table, ``TABLE``) and weight names.

Phi's layer is parallel with one norm, x + attn(ln(x)) + mlp(ln(x)): blockspec's parallel block with
``shared_norm``. The attention is the Llama-like q/k/v (grouped kv heads possible) and its output is
``dense``; the MLP is fc1 -> activation -> fc2; every linear has a bias, and so does the output layer
``lm_head``, tied or not. RoPE turns the first ``partial_rotary_factor`` of each head in the half layout,
0.5 when no place gives it (PhiConfig's default, not 1). ``qk_layernorm`` (LayerNorms of q and k) is
refused: blockspec's q/k norms are RMSNorms.
"""

from __future__ import annotations

from typing import Any

from blockspec.interop.config_reader import ConfigReader, rope, rope_json
from blockspec.interop.config_table import (Document, Key, Table, fixed, folded_dropout, mapped, norm_eps,
                                            table_family, tied)
from blockspec.interop.families import llama_like
from blockspec.interop.families.gpt2 import activation_key
from blockspec.interop.families.gpt_neox import check_rotary_width
from blockspec.interop.weight_map import Rule, same, stacked
from blockspec.modules.attention import qkv_split_sizes
from blockspec.spec.schema import ModelSpec

ARCHITECTURE = "PhiForCausalLM"
DEFAULT_FRACTION = 0.5  # what PhiConfig rotates when neither rope_parameters nor the top level says
PARAMETERS = ("weight", "bias")  # every Phi linear and LayerNorm has both
LAYER_PAIRS = (("norm1", "input_layernorm"), ("attn.proj", "self_attn.dense"), ("ffn.up", "mlp.fc1"),
               ("ffn.down", "mlp.fc2"))  # blockspec's name in a block -> Phi's in a layer


# ---------------------------------------------------------------- the table


def _head_dim(model: dict[str, Any]) -> int | None:
    """The width of a head, for the rotated fraction's check (None: the sizes are the spec's to refuse)."""
    d_model, n_heads = model["d_model"], model["n_heads"]
    return model.get("head_dim") or (d_model // n_heads if d_model and n_heads else None)


def _fraction_key(r: ConfigReader) -> str | None:
    """Where transformers 5 finds the rotated fraction: the rope table it reads (rope_scaling when set, else
    rope_parameters), then the top level; None: nowhere, and PhiConfig takes 0.5."""
    scaling = r.config.get("rope_scaling")
    name = "rope_scaling" if isinstance(scaling, dict) and scaling else "rope_parameters"
    table = r.config.get(name)
    if isinstance(table, dict) and table.get("partial_rotary_factor") is not None:
        return f"{name}.partial_rotary_factor"
    return "partial_rotary_factor" if r.config.get("partial_rotary_factor") is not None else None


def _positional(r: ConfigReader, document: Document, title: str) -> None:
    """rope(r), with Phi's default fraction where no key gives one; a top-level fraction (transformers 4's
    place) that disagrees with the table's is refused, and so is a width that is not an even number >= 2."""
    positional = document["positional"] = rope(r)
    key = _fraction_key(r)
    if key is None:
        positional["fraction"] = DEFAULT_FRACTION
    fraction = positional.get("fraction", 1.0)
    llama_like.top_level_fraction(r, fraction)
    check_rotary_width(r, key or "partial_rotary_factor", _head_dim(document["model"]), fraction)


def _rope_json(spec: ModelSpec) -> dict[str, Any]:
    """rope_json, with the rotated fraction always written (absent, Phi takes 0.5, not 1), at the top level too,
    where transformers 4 reads it."""
    keys, fraction = rope_json(spec.positional.config), getattr(spec.positional.config, "fraction", 1.0)
    keys["rope_parameters"]["partial_rotary_factor"] = fraction
    return {**keys, "partial_rotary_factor": fraction}


def _head_bias_misfits(spec: ModelSpec) -> list[str]:
    if getattr(spec.head.config, "bias", False):
        return []
    return ["[head] bias = false: the family's output layer (lm_head) always has a bias"]


# lm_head always has a bias (no config key says so): a head without one cannot be written
HEAD_BIAS = Key(name="lm_head.bias", read=lambda r, document, title: None, expresses={"head_bias": True},
                misfits=_head_bias_misfits)

TABLE = Table(
    keys=(*llama_like.SIZES, llama_like.kv_heads(),
          llama_like.head_dim(always=False),  # not a PhiConfig key, but PhiAttention reads it when given
          # embedding and attention dropout: training only, blockspec's one rate is resid_pdrop
          mapped("resid_pdrop", "model.dropout", float, 0.0), folded_dropout("embd_pdrop"),
          folded_dropout("attention_dropout"),
          llama_like.rope_key(_positional, _rope_json, fraction=True),  # partial_rotary_factor at the top too
          norm_eps("layer_norm_eps", "layernorm", 1e-5), activation_key("hidden_act", "gelu_new"),
          fixed("qk_layernorm", False, "LayerNorms of q and k are not supported (blockspec's q/k norms are RMSNorms)"),
          tied(), HEAD_BIAS),
    frame={"model": {"bias": True, "norm_placement": "pre"}, "block": {"use": "parallel", "shared_norm": True},
           "attention": {"use": "causal"}, "head": {"use": "lm", "bias": True}},
    has={"biases": "all", "blocks": ("parallel",), "shared_norm": True},
)


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec) -> list[Rule]:
    found = [same("embedding.weight", "model.embed_tokens.weight")]
    found += [same(f"final_norm.{p}", f"model.final_layernorm.{p}") for p in PARAMETERS]
    for i in range(spec.model.n_layers):
        found += _layer(spec, f"blocks.{i}", f"model.layers.{i}")
    if not spec.head.config.tied:
        found.append(same("head.weight", "lm_head.weight"))
    return [*found, same("head.bias", "lm_head.bias")]  # a tied head keeps its own bias


def _layer(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    """q_proj, k_proj, v_proj: blockspec's qkv = cat[q, k, v], weights and biases; the rest as they are."""
    m = spec.model
    sizes = qkv_split_sizes(m.n_heads, m.kv_heads, m.head_dim)
    found = [stacked(f"{ours}.attn.qkv.{p}", [f"{theirs}.self_attn.{n}_proj.{p}" for n in "qkv"], sizes)
             for p in PARAMETERS]
    return found + [same(f"{ours}.{mine}.{p}", f"{theirs}.{hf}.{p}") for mine, hf in LAYER_PAIRS for p in PARAMETERS]


FAMILY = table_family(name="phi", title="Phi", architecture=ARCHITECTURE, model_type="phi", table=TABLE,
                      rules=rules, layer_index=llama_like.LAYER_INDEX, ignored=llama_like.ignored)
