"""Phi-3 (Phi3ForCausalLM): the Llama-like keys (``llama_like.BASE``), and the weight names.

Phi-3 is Llama's layer with blockspec's own fusions: ``qkv_proj`` is q|k|v and ``gate_up_proj``
is gate|up, as blockspec's qkv and ffn.up, so every weight maps as it is. It adds a sliding
window, partial RoPE (``partial_rotary_factor``, Phi-4-mini) and no biases anywhere. The long
context variants' RoPE scaling, ``longrope`` (which Phi-3 also reads for 'su' and 'yarn'), has
no blockspec equivalent and is refused by name.
"""

from __future__ import annotations

from typing import Any

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader, rope, rope_json
from blockspec.interop.config_table import Document, accepted, folded_dropout, mapped, table_family
from blockspec.interop.families import llama_like
from blockspec.interop.families.gpt_neox import check_rotary_width
from blockspec.interop.weight_map import Rule, same

ARCHITECTURE = "Phi3ForCausalLM"
LONGROPE = ("longrope", "su", "yarn")  # Phi3Config turns 'su' and 'yarn' into 'longrope'


def _head_dim(model: dict[str, Any]) -> int | None:
    """The width of a head, for the rotated fraction's check (None: the sizes are the spec's to refuse)."""
    d_model, n_heads = model["d_model"], model["n_heads"]
    return model.get("head_dim") or (d_model // n_heads if d_model and n_heads else None)


def _fraction_key(r: ConfigReader) -> str:
    """Where the rotated fraction rope(r) used was written: rope_parameters' first, else the top level."""
    parameters = r.config.get("rope_parameters")
    inside = isinstance(parameters, dict) and parameters.get("partial_rotary_factor") is not None
    return "rope_parameters.partial_rotary_factor" if inside else "partial_rotary_factor"


def _positional(r: ConfigReader, document: Document, title: str) -> None:
    if _scaled(r):
        r.accept("rope_theta", "partial_rotary_factor")  # the rope is refused as a whole: no second problem
        document["positional"] = {"use": "rope"}
        return
    positional = document["positional"] = rope(r)
    llama_like.top_level_fraction(r, positional.get("fraction", 1.0))
    check_rotary_width(r, _fraction_key(r), _head_dim(document["model"]), positional.get("fraction", 1.0))


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


def _kind(table: dict[str, Any] | None) -> str:
    return table.get("rope_type", table.get("type", "default")) if table else "default"


def _rope_json(spec: ModelSpec) -> dict[str, Any]:
    """rope_json, and the rotated fraction at the top level too, where transformers 4 reads it (Phi-4-mini)."""
    keys, fraction = rope_json(spec.positional.config), getattr(spec.positional.config, "fraction", 1.0)
    return {**keys, "partial_rotary_factor": fraction} if fraction != 1.0 else keys


TABLE = llama_like.BASE.but(
    llama_like.head_dim(always=False), llama_like.rms_norm_eps(1e-5), llama_like.sliding_window(None),
    llama_like.rope_key(_positional, _rope_json, fraction=True),
    # original_max_position_embeddings: read only by longrope, which _positional refuses
    accepted("original_max_position_embeddings", lambda spec: spec.model.context_length),
    accepted("attention_bias", lambda spec: False),  # Phi3ForCausalLM builds no biases whatever it says
    # embedding and attention dropout: training only, blockspec's one rate is resid_pdrop
    mapped("resid_pdrop", "model.dropout", float, 0.0), folded_dropout("embd_pdrop"),
    folded_dropout("attention_dropout"),
)


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec) -> list[Rule]:
    return llama_like.rules(spec, attention=_attention_rules, mlp=_mlp_rules)


def _attention_rules(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    """qkv_proj is q|k|v, as blockspec's qkv: the same tensor both sides."""
    return [same(f"{ours}.qkv.weight", f"{theirs}.qkv_proj.weight"),
            same(f"{ours}.proj.weight", f"{theirs}.o_proj.weight")]


def _mlp_rules(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    """gate_up_proj is gate|up, as blockspec's ffn.up: the same tensor both sides."""
    return [same(f"{ours}.up.weight", f"{theirs}.gate_up_proj.weight"),
            same(f"{ours}.down.weight", f"{theirs}.down_proj.weight")]


FAMILY = table_family(name="phi3", title="Phi-3", architecture=ARCHITECTURE, model_type="phi3", table=TABLE,
                      rules=rules, layer_index=llama_like.LAYER_INDEX, ignored=llama_like.ignored)
