"""Phi-3 (Phi3ForCausalLM): the Llama-like keys (``llama_like.BASE``), and the weight names.

Phi-3 is Llama's layer with blockspec's own fusions: ``qkv_proj`` is q|k|v and ``gate_up_proj``
is gate|up, as blockspec's qkv and ffn.up, so every weight maps as it is. It adds a sliding
window, partial RoPE (``partial_rotary_factor``, Phi-4-mini) and no biases anywhere. The long
context variants' RoPE scaling, ``longrope`` (which Phi-3 also reads for 'su' and 'yarn'), imports as
rope's ``scaling = "longrope"``; ``original_max_position_embeddings`` (Phi3Config's default 4096 when absent)
is its original length. Each call takes the short or the long factors by where it ends, as transformers'
forward does, so forward logits agree at every length; generation recomputes its cache at the switch, as
transformers' generate does (the rope's ``recompute_cache_at``), so generated tokens agree too.
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
LONGROPE = {"su": "longrope", "yarn": "longrope"}  # Phi3Config turns 'su' and 'yarn' into 'longrope'
ORIGINAL_DEFAULT = 4096  # Phi3Config.original_max_position_embeddings when config.json has none


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
    if _refused(r):
        r.accept("rope_theta", "partial_rotary_factor")  # the rope is refused as a whole: no second problem
        document["positional"] = {"use": "rope"}
        return
    if "longrope" in {_kind(r.table(key)) for key in ("rope_scaling", "rope_parameters")}:
        _top_level_original(r)
    positional = document["positional"] = rope(r, renamed=LONGROPE, longrope=True)
    llama_like.top_level_fraction(r, positional.get("fraction", 1.0))
    check_rotary_width(r, _fraction_key(r), _head_dim(document["model"]), positional.get("fraction", 1.0))
    if positional.get("scaling") == "longrope":
        _check_longrope(r, positional, _head_dim(document["model"]))


def _top_level_original(r: ConfigReader) -> None:
    """Phi3Config's top-level original_max_position_embeddings (4096 when absent) replaces the rope table's:
    a table's other value, without a top-level one, is refused at its key rather than silently replaced."""
    if r.config.get("original_max_position_embeddings") is not None:
        return
    table = "rope_scaling" if r.table("rope_scaling") else "rope_parameters"
    inside = (r.table(table) or {}).get("original_max_position_embeddings")
    if inside is not None and inside != ORIGINAL_DEFAULT:
        r.problem(f"{table}.original_max_position_embeddings", f"{inside!r}: Phi3Config replaces it with its "
                  f"top-level original_max_position_embeddings, {ORIGINAL_DEFAULT} when config.json has none",
                  "set the top-level original_max_position_embeddings to it")
    r.config = {**r.config, "original_max_position_embeddings": inside if inside is not None else ORIGINAL_DEFAULT}


def _check_longrope(r: ConfigReader, positional: dict[str, Any], head_dim: int | None) -> None:
    """One factor per rotated pair (int(head_dim · fraction) / 2, as transformers checks), and an original
    length of at least 2 (the attention factor divides by its log), refused at their config.json keys."""
    table = "rope_scaling" if r.table("rope_scaling") else "rope_parameters"
    pairs = int(head_dim * positional.get("fraction", 1.0)) // 2 if head_dim else None
    for name in ("short_factor", "long_factor"):
        found = len(positional.get(name, ()))
        if pairs is not None and found not in (0, pairs):  # 0: missing, which the spec refuses by name
            r.problem(f"{table}.{name}", f"{found} factors, expected {pairs} (one per rotated feature pair)")
    original = positional.get("original_context_length")
    said = any(p.path.endswith("original_max_position_embeddings") for p in r.problems)
    if original is not None and original < 2 and not said:
        r.problem("original_max_position_embeddings", f"{original}: longrope's attention factor divides by its "
                  "log", "expected an integer >= 2")


def _refused(r: ConfigReader) -> bool:
    """Refuse the RoPE scaling types Phi3Config rejects (all but default, longrope, su and yarn); True if any."""
    refused = False
    for key in ("rope_scaling", "rope_parameters"):
        kind = _kind(r.table(key))
        if kind != "default" and LONGROPE.get(kind, kind) != "longrope":
            refused = True
            r.problem(f"{key}.rope_type", f"RoPE scaling {kind!r} is not one Phi-3 has",
                      "transformers' Phi-3 takes 'default' or 'longrope' (also as 'su' or 'yarn') only")
    return refused


def _kind(table: dict[str, Any] | None) -> str:
    kind = table.get("rope_type", table.get("type", "default")) if table else "default"
    return LONGROPE.get(kind, kind) if isinstance(kind, str) else "default"  # a non-string: rope() refuses it


def _rope_json(spec: ModelSpec) -> dict[str, Any]:
    """rope_json, and the rotated fraction at the top level too, where transformers 4 reads it (Phi-4-mini)."""
    keys, fraction = rope_json(spec.positional.config), getattr(spec.positional.config, "fraction", 1.0)
    return {**keys, "partial_rotary_factor": fraction} if fraction != 1.0 else keys


def _original(spec: ModelSpec) -> int:
    """longrope's original length, else the context length (which nothing reads then)."""
    length = getattr(spec.positional.config, "original_context_length", None)
    return length if getattr(spec.positional.config, "scaling", None) == "longrope" else spec.model.context_length


TABLE = llama_like.BASE.but(
    llama_like.head_dim(always=False), llama_like.rms_norm_eps(1e-5), llama_like.sliding_window(None),
    llama_like.rope_key(_positional, _rope_json, fraction=True, longrope=True),
    # original_max_position_embeddings: read only by longrope, as its original length
    accepted("original_max_position_embeddings", lambda spec: _original(spec)),
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
