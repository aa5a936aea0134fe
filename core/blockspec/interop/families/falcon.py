"""Falcon (FalconForCausalLM): its config.json keys (one table, ``TABLE``) and weight names.

Falcon's layer is one of three: sequential pre-norm (``parallel_attn`` false: blockspec's pre block), parallel
with one LayerNorm feeding both sublayers (``input_layernorm``: Falcon-7B; blockspec's parallel block with
``shared_norm``), or, with ``new_decoder_architecture`` (Falcon-40B), parallel with ``ln_attn`` and ``ln_mlp``
(``num_ln_in_parallel_attn`` 2, its default; 1 is the shared norm). One ``bias`` covers every linear.

q, k and v are fused in ``query_key_value``, its rows (kv heads, queries per kv head + 2, head_dim): for each kv
head its queries, then its k, then its v, as FalconAttention splits them. One kv head (``multi_query``) is
q of every head, then k, then v; one per head is (heads, 3, head_dim); Falcon-40B and 180B group 8. One rule
(``qkv_order``) takes the blocks to blockspec's q | k | v for all three. The old architecture has one kv head
or one per head only. ``alibi`` is refused: blockspec's attention has no ALiBi bias.
"""

from __future__ import annotations

from typing import Any

from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.config_table import (Document, Key, Table, fixed, folded_dropout, mapped, norm_eps,
                                            table_family, tied)
from blockspec.interop.families import llama_like
from blockspec.interop.families.gpt2 import activation_key
from blockspec.interop.weight_map import Rule, reordered, same
from blockspec.spec.schema import ModelSpec

ARCHITECTURE = "FalconForCausalLM"
LAYER_INDEX = r"^transformer\.h\.(\d+)\."
NORMS = {"pre": (("norm1", "input_layernorm"), ("norm2", "post_attention_layernorm")),
         "shared": (("norm1", "input_layernorm"),), "parallel": (("norm1", "ln_attn"), ("norm2", "ln_mlp"))}


# ---------------------------------------------------------------- the table


def _layout(r: ConfigReader, document: Document, title: str) -> None:
    """The block from new_decoder_architecture, parallel_attn and num_ln_in_parallel_attn; the kv heads from
    multi_query (old architecture) or num_kv_heads (new), as FalconAttention builds them."""
    new, parallel = r.get("new_decoder_architecture", bool, False), r.get("parallel_attn", bool, True)
    norms = r.get("num_ln_in_parallel_attn", int, 2 if new else 1)
    if new and not parallel:
        r.problem("parallel_attn", "false with new_decoder_architecture", "transformers cannot build it: its new "
                  "architecture is parallel; expected true")
    if norms not in (1, 2) or norms == 2 and not new:
        r.problem("num_ln_in_parallel_attn", f"{norms} norms", "transformers builds 2 (ln_attn, ln_mlp) only in the "
                  "new architecture, else 1 (input_layernorm)")
    if parallel:
        document["block"] = {"use": "parallel", "shared_norm": True} if norms == 1 else {"use": "parallel"}
    document["model"]["n_kv_heads"] = _kv_heads(r, new, document["model"]["n_heads"])


def _kv_heads(r: ConfigReader, new: bool, heads: int | None) -> int | None:
    """1 (multi_query, old architecture), else num_kv_heads (default: one per head) if blockspec maps its rows."""
    r.accept("num_key_value_heads")  # derived by FalconConfig from the keys below, whatever config.json says
    multi_query, kv = r.get("multi_query", bool, True), r.get("num_kv_heads", int, heads)
    if not new and multi_query:
        return 1  # FalconAttention ignores num_kv_heads here
    if not new and kv != heads:
        r.problem("num_kv_heads", f"{kv} kv heads without multi_query", "transformers cannot build them: the old "
                  "architecture's query_key_value has one k and one v per head")
    elif heads and kv and heads % kv:
        r.problem("num_kv_heads", f"{kv} kv heads for {heads} heads", "expected a divisor of num_attention_heads")
    return kv


def _write_layout(spec: ModelSpec) -> dict[str, Any]:
    """The old architecture for a pre or shared-norm parallel block (Falcon-7B's), the new for two norms and
    for grouped kv heads (which only it has: a shared-norm one then says num_ln_in_parallel_attn = 1)."""
    kv, parallel = spec.model.kv_heads, spec.block.name == "parallel"
    shared = parallel and spec.block.config.shared_norm
    new = parallel and (not shared or kv not in (1, spec.model.n_heads))
    return {"new_decoder_architecture": new, "parallel_attn": parallel,
            "num_ln_in_parallel_attn": (1 if shared else 2) if new else None, "multi_query": kv == 1,
            "num_kv_heads": kv}


def _kv_misfits(spec: ModelSpec) -> list[str]:
    m = spec.model
    if m.kv_heads in (1, m.n_heads) or spec.block.name == "parallel":
        return []
    return [f"[model] n_kv_heads = {m.kv_heads} with block {spec.block.name!r}: Falcon groups kv heads only in its "
            "new architecture, which is parallel"]


def qkv_order(kv_heads: int, n_heads: int) -> tuple[int, ...]:
    """Falcon's fused rows in blocks of head_dim (per kv head: its queries, its k, its v) -> blockspec's q of
    every head, then k, then v, as the blocks to take in order."""
    per_kv = n_heads // kv_heads
    width = per_kv + 2
    queries = [group * width + j for group in range(kv_heads) for j in range(per_kv)]
    return tuple(queries + [g * width + per_kv for g in range(kv_heads)] + [g * width + per_kv + 1
                                                                            for g in range(kv_heads)])


def _accept_post_layernorm(r: ConfigReader, document: Document, title: str) -> None:
    """apply_residual_connection_post_layernorm, from the original RW code: transformers never reads it, so only
    false (what transformers computes) is accepted."""
    if r.get("apply_residual_connection_post_layernorm", bool, False):
        r.problem("apply_residual_connection_post_layernorm", "a residual from the norm's output is not "
                  "supported", "FalconForCausalLM ignores this key and adds the norm's input; expected false")


TABLE = Table(
    keys=(mapped("vocab_size", "model.vocab_size", int),
          mapped("hidden_size", "model.d_model", int, aliases=("n_embed",)),
          mapped("num_hidden_layers", "model.n_layers", int), mapped("num_attention_heads", "model.n_heads", int),
          mapped("max_position_embeddings", "model.context_length", int, 2048),
          Key(name="ffn_hidden_size", write=lambda spec: {"ffn_hidden_size": spec.model.d_ff},
              read=lambda r, document, title: document["model"].update(
                  d_ff=r.get("ffn_hidden_size", int, 4 * (document["model"]["d_model"] or 0)))),
          mapped("bias", "model.bias", bool, False),
          mapped("hidden_dropout", "model.dropout", float, 0.0), folded_dropout("attention_dropout"),
          fixed("alibi", False, "ALiBi is not supported: blockspec's attention has no ALiBi bias"),
          llama_like.FULL_ROPE, norm_eps("layer_norm_epsilon", "layernorm", 1e-5),
          activation_key("activation", "gelu"), tied(True),
          Key(name="new_decoder_architecture", read=_layout, write=_write_layout, misfits=_kv_misfits,
              expresses={"blocks": ("pre", "parallel"), "either_norm": True}),
          Key(name="apply_residual_connection_post_layernorm", read=_accept_post_layernorm)),
    frame={"model": {"norm_placement": "pre"}, "attention": {"use": "causal"}, "head": {"use": "lm"}},
    has={"biases": "use_bias"},
)


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec) -> list[Rule]:
    found = [same("embedding.weight", "transformer.word_embeddings.weight"),
             *llama_like.norm_rules(spec, "final_norm", "transformer.ln_f")]
    for i in range(spec.model.n_layers):
        found += _layer(spec, f"blocks.{i}", f"transformer.h.{i}")
    if not spec.head.config.tied:
        found.append(same("head.weight", "lm_head.weight"))
    return found


def _layer(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    """The layer's norms, its fused query_key_value (its blocks taken in ``qkv_order``), dense and MLP."""
    kind = "pre" if spec.block.name != "parallel" else "shared" if spec.block.config.shared_norm else "parallel"
    found = [rule for mine, hf in NORMS[kind]
             for rule in llama_like.norm_rules(spec, f"{ours}.{mine}", f"{theirs}.{hf}")]
    order = qkv_order(spec.model.kv_heads, spec.model.n_heads)
    for p in ("weight", "bias") if spec.model.bias else ("weight",):
        qkv = f"{theirs}.self_attention.query_key_value.{p}"
        found += [reordered(f"{ours}.attn.qkv.{p}", qkv, order),
                  same(f"{ours}.attn.proj.{p}", f"{theirs}.self_attention.dense.{p}"),
                  same(f"{ours}.ffn.up.{p}", f"{theirs}.mlp.dense_h_to_4h.{p}"),
                  same(f"{ours}.ffn.down.{p}", f"{theirs}.mlp.dense_4h_to_h.{p}")]
    return found


FAMILY = table_family(name="falcon", title="Falcon", architecture=ARCHITECTURE, model_type="falcon", table=TABLE,
                      rules=rules, layer_index=LAYER_INDEX, ignored=llama_like.ignored)
