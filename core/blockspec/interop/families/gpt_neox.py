"""GPT-NeoX and Pythia (GPTNeoXForCausalLM): its config.json keys (one table, ``TABLE``) and weight names.

GPT-NeoX fuses q, k and v into one ``query_key_value`` matrix like blockspec's qkv, but per head:
its rows are (heads, 3, head_dim) where blockspec's are (3, heads, head_dim), so the rule regroups
them. RoPE turns the first ``rotary_pct`` of each head in the "half" layout, as blockspec's rope
with ``fraction`` does. Layers are parallel (``use_parallel_residual``: x + attn(ln1(x)) + mlp(ln2(x)))
or sequential pre-norm; LayerNorms and MLP linears always have biases, attention's follow
``attention_bias``. Older configs name the rope keys ``rotary_emb_base`` and ``rotary_pct``;
transformers 5 writes them into ``rope_parameters`` and names the head ``lm_head`` in memory,
``embed_out`` on disk.
"""

from __future__ import annotations

import re
from typing import Any

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader, rope, rope_json
from blockspec.interop.config_table import (Document, Key, Table, accepted, folded_dropout, mapped, norm_eps,
                                            table_family, tied)
from blockspec.interop.families import llama_like
from blockspec.interop.families.gpt2 import activation_key
from blockspec.interop.family import biases
from blockspec.interop.weight_map import Rule, regrouped, same

ARCHITECTURE = "GPTNeoXForCausalLM"
PREFIX = "gpt_neox."
HEAD = "embed_out.weight"
IGNORED = re.compile(r"\.attention\.(bias|masked_bias|rotary_emb\.inv_freq)$")  # buffers old checkpoints saved
LAYER_INDEX = r"^gpt_neox\.layers\.(\d+)\."
DEFAULT_BASE, DEFAULT_FRACTION = 10000.0, 0.25  # transformers' GPT-NeoX defaults (rotary_emb_base, rotary_pct)


# ---------------------------------------------------------------- the table


def _attention_bias(r: ConfigReader, document: Document, title: str) -> None:
    """attention_bias (transformers >= 4.45) switches the qkv and output biases off; the MLP keeps its."""
    if not r.get("attention_bias", bool, True):
        document["attention"].update(qkv_bias=False, out_bias=False)


def _parallel(r: ConfigReader, document: Document, title: str) -> None:
    if r.get("use_parallel_residual", bool, True):
        document["block"] = {"use": "parallel"}  # x + attn(norm1(x)) + ffn(norm2(x))


def _positional(r: ConfigReader, document: Document, title: str) -> None:
    """rope(r) reads rope_parameters (and any scaling); where that table lacks the base or the rotated
    fraction, GPT-NeoX takes rotary_emb_base and rotary_pct, else 10000 and 0.25, never the top-level
    rope_theta or partial_rotary_factor (transformers ignores those for GPT-NeoX: refused if they differ)."""
    positional = document["positional"] = rope(r)
    table = _rope_table(r)
    if table.get("rope_theta") is None:  # rope(r) took a top-level rope_theta as the base: GPT-NeoX does not
        positional["base"] = r.get("rotary_emb_base", float, DEFAULT_BASE)
        _same_as(r, "rope_theta", positional["base"], "the base GPT-NeoX uses")
    else:
        _same_as(r, "rotary_emb_base", positional["base"], "rope_parameters.rope_theta")
    fraction_key = "rope_parameters.partial_rotary_factor"
    if table.get("partial_rotary_factor") is None:
        fraction_key = "rotary_pct"
        positional["fraction"] = r.get("rotary_pct", float, DEFAULT_FRACTION)
    else:
        _same_as(r, "rotary_pct", positional.get("fraction", 1.0), fraction_key)
    _same_as(r, "partial_rotary_factor", positional.get("fraction", 1.0), "the rotated fraction GPT-NeoX uses")
    model = document["model"]
    head_dim = model["d_model"] // model["n_heads"] if model["d_model"] and model["n_heads"] else None
    check_rotary_width(r, fraction_key, head_dim, positional.get("fraction", 1.0))
    if positional.get("fraction") == 1.0:
        del positional["fraction"]


def _rope_table(r: ConfigReader) -> dict[str, Any]:
    """The table transformers reads the rope from: rope_scaling (old name) before rope_parameters."""
    table = r.config.get("rope_scaling") or r.config.get("rope_parameters")
    return table if isinstance(table, dict) else {}


def _same_as(r: ConfigReader, key: str, used: float, what: str) -> None:
    """A key GPT-NeoX does not read here: harmless when it agrees with what is used, refused otherwise."""
    value = r.get(key, float, None)
    if value is not None and value != used:
        r.problem(key, f"{value} differs from {what} ({used})", "transformers' GPT-NeoX ignores this key here; "
                  "remove it or make it agree")


def check_rotary_width(r: ConfigReader, key: str, head_dim: int | None, fraction: float) -> None:
    """transformers turns int(head_dim · fraction) features; blockspec an even number of them, at least 2."""
    if head_dim is None:
        return
    width = int(head_dim * fraction)
    if width < 2 or width % 2:
        r.problem(key, f"{fraction} of head_dim {head_dim} rotates {width} features",
                  "blockspec's rope turns feature pairs: expected an even number, at least 2")


def _rope_json(spec: ModelSpec) -> dict[str, Any]:
    """rotary_emb_base and rotary_pct (older configs'), and rope_parameters with its rotated fraction always
    (transformers' default is 0.25, not 1)."""
    positional = spec.positional.config
    fraction = getattr(positional, "fraction", 1.0)
    rope_keys = rope_json(positional)
    rope_keys["rope_parameters"]["partial_rotary_factor"] = fraction
    return {"rotary_emb_base": positional.base, "rotary_pct": fraction, **rope_keys}


TABLE = Table(
    keys=(*llama_like.SIZES, mapped("hidden_dropout", "model.dropout", float, 0.0),
          # attention dropout: training only, blockspec's one rate is hidden_dropout; classifier_dropout: the
          # sequence-classification head's, never built for GPTNeoXForCausalLM
          folded_dropout("attention_dropout"), accepted("classifier_dropout"),
          llama_like.rope_key(_positional, _rope_json, fraction=True),  # rotary_emb_base, rotary_pct too
          norm_eps("layer_norm_eps", "layernorm", 1e-5), activation_key("hidden_act", "gelu"),
          Key(name="attention_bias", read=_attention_bias, write=lambda spec: {"attention_bias": biases(spec)[0]},
              expresses={"biases": "attention_bias_and_mlp"}),
          tied(),
          Key(name="use_parallel_residual", read=_parallel, expresses={"blocks": ("parallel", "pre")},
              write=lambda spec: {"use_parallel_residual": spec.block.name == "parallel"})),
    frame={"model": {"bias": True, "norm_placement": "pre"}, "attention": {"use": "causal"}, "head": {"use": "lm"}},
    has={"grouped_kv": False},
)


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec) -> list[Rule]:
    found = [same("embedding.weight", "gpt_neox.embed_in.weight")]
    found += [same(f"final_norm.{p}", f"gpt_neox.final_layer_norm.{p}") for p in ("weight", "bias")]
    for i in range(spec.model.n_layers):
        found += _block(spec, i)
    if not spec.head.config.tied:
        found.append(same("head.weight", HEAD))
    return found


def _block(spec: ModelSpec, i: int) -> list[Rule]:
    ours, theirs = f"blocks.{i}", f"gpt_neox.layers.{i}"
    heads = (spec.model.n_heads, 3)  # query_key_value rows: (heads, 3, head_dim); blockspec's: (3, heads, ...)
    qkv_bias, out_bias, _ = biases(spec)
    found = []
    for p in ("weight", "bias"):
        if p == "weight" or qkv_bias:
            found += [regrouped(f"{ours}.attn.qkv.{p}", f"{theirs}.attention.query_key_value.{p}", heads)]
        if p == "weight" or out_bias:
            found += [same(f"{ours}.attn.proj.{p}", f"{theirs}.attention.dense.{p}")]
        found += [same(f"{ours}.norm1.{p}", f"{theirs}.input_layernorm.{p}"),
                  same(f"{ours}.norm2.{p}", f"{theirs}.post_attention_layernorm.{p}"),
                  same(f"{ours}.ffn.up.{p}", f"{theirs}.mlp.dense_h_to_4h.{p}"),
                  same(f"{ours}.ffn.down.{p}", f"{theirs}.mlp.dense_4h_to_h.{p}")]
    return found


def normalize_name(name: str) -> str:
    """transformers 5 may save the head as lm_head (its name in memory); files from GPTNeoXModel lack the prefix."""
    if name in (HEAD, "lm_head.weight"):
        return HEAD
    return name if name.startswith(PREFIX) else PREFIX + name


def ignored(name: str, spec: ModelSpec) -> bool:
    """Buffers transformers ignores too, and a tied model's redundant head copy."""
    return bool(IGNORED.search(name)) or (name == HEAD and spec.head.config.tied)


FAMILY = table_family(name="gpt_neox", title="GPT-NeoX", architecture=ARCHITECTURE, model_type="gpt_neox",
                      table=TABLE, rules=rules, layer_index=LAYER_INDEX, ignored=ignored, normalize_name=normalize_name)
