"""Qwen3-MoE (Qwen3MoeForCausalLM): Qwen3's attention (q and k RMS-normalised per head, one ``attention_bias``)
with every FFN a sparse mixture of SwiGLU experts, blockspec-moe's ``ffn:moe``.

The router (``mlp.gate``) scores ``num_experts`` experts of width ``moe_intermediate_size``; a softmax picks
the top ``num_experts_per_tok``, whose weights are renormalised to sum to 1 when ``norm_topk_prob``. There are
no shared experts. The files keep each expert apart (``mlp.experts.j.gate_proj/up_proj/down_proj``; transformers
5 fuses them only in memory); blockspec stacks them: ``up`` (E, 2·d_ff, d) is each expert's gate then up.

Dense layers (``mlp_only_layers``, ``decoder_sparse_step`` above 1) are refused: the family's export check
configures every layer alike. Qwen3MoeForCausalLM slides every layer when ``use_sliding_window`` (it has no
``layer_types``, and never reads ``max_window_layers``).
"""

from __future__ import annotations

from typing import Any

from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.config_table import Document, Key, mapped, table_family
from blockspec.interop.family import SOFTMAX_TOP_K, moe_option_misfits, windows_of
from blockspec.interop.families import llama_like
from blockspec.interop.weight_map import Rule, per_expert, same
from blockspec.spec.schema import ModelSpec

ARCHITECTURE = "Qwen3MoeForCausalLM"
EXPERT_COUNT = ("num_experts", "num_local_experts")  # transformers 4's name, transformers 5's


def _windows(r: ConfigReader, document: Document, title: str) -> None:
    """sliding_window on every layer when use_sliding_window (Qwen3MoeConfig nulls it otherwise)."""
    window = llama_like.nullable(r, "sliding_window", int, 4096)
    r.accept("max_window_layers")  # released configs carry it; Qwen3MoeForCausalLM never reads it
    if r.get("use_sliding_window", bool, False) and window is not None:
        document["attention"]["sliding_window"] = window


def _write_windows(spec: ModelSpec) -> dict[str, Any]:
    window = windows_of(spec)[0] if spec.model.n_layers else None
    return {"use_sliding_window": window is not None, "sliding_window": window}


def _every_layer_sparse(r: ConfigReader, document: Document, title: str) -> None:
    """decoder_sparse_step and mlp_only_layers make some layers dense: refused, as the export check refuses
    [[layers]] that differ in their ffn."""
    step = r.get("decoder_sparse_step", int, 1)
    if step is not None and step != 1:
        r.problem("decoder_sparse_step", f"dense layers (every layer but each {step}th) are not supported",
                  "the Qwen3-MoE family has a mixture of experts on every layer; expected 1")
    dense = r.get("mlp_only_layers", list, None)
    if dense:
        r.problem("mlp_only_layers", f"dense layers {dense!r:.40} are not supported",
                  "the Qwen3-MoE family has a mixture of experts on every layer; expected []")


def _experts_count(r: ConfigReader, document: Document, title: str) -> None:
    """num_experts (released configs, transformers 4) or num_local_experts (what transformers 5 writes, its
    attribute_map aliasing the other): refused when both are given and differ."""
    given = [r.get(name, int, None) for name in EXPERT_COUNT]
    if None not in given and given[0] != given[1]:
        r.problem("num_local_experts", f"{given[1]} differs from num_experts = {given[0]}", "keep one")
    document["ffn"]["n_experts"] = next((n for n in given if n is not None), 128)


def _routing_misfits(spec: ModelSpec) -> list[str]:
    """blockspec-moe's ffn as Qwen3-MoE routes: a plain softmax top-k, routed experts only."""
    return moe_option_misfits(spec, SOFTMAX_TOP_K, "Qwen3-MoE routes by a softmax top-k over routed experts alone")


def _expert_width(spec: ModelSpec) -> dict[str, Any]:
    return {"moe_intermediate_size": spec.ffn.config.expert_d_ff or spec.model.d_ff}


TABLE = llama_like.BASE.but(
    llama_like.head_dim(always=False),  # not a Qwen3MoeConfig key, but its attention reads it when given
    llama_like.ATTENTION_BIAS_ONLY, llama_like.qk_norms("head"),
    Key(name="sliding_window", read=_windows, write=_write_windows, expresses={"windows": "all"}),
    Key(name="num_experts", read=_experts_count, expresses={"ffn": "moe"},
        write=lambda spec: dict.fromkeys(EXPERT_COUNT, spec.ffn.config.n_experts)),
    mapped("num_experts_per_tok", "ffn.top_k", int, 8),
    mapped("norm_topk_prob", "ffn.renormalize", bool, False),
    Key(name="moe_intermediate_size", write=_expert_width,
        read=lambda r, document, title: document["ffn"].update(expert_d_ff=r.get("moe_intermediate_size", int, 768))),
    # weighs the load-balancing loss in training only (transformers adds it only with output_router_logits)
    mapped("router_aux_loss_coef", "ffn.aux_loss_coef", float, 0.001),
    Key(name="decoder_sparse_step", read=_every_layer_sparse, misfits=_routing_misfits,
        write=lambda spec: {"decoder_sparse_step": 1, "mlp_only_layers": []}),
    frame={"attention": {"use": "causal"}, "ffn": {"use": "moe"}},
)


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec) -> list[Rule]:
    return llama_like.rules(spec, mlp=_experts)


def _experts(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    """The router (gate), and each expert's gate_proj, up_proj and down_proj stacked into up and down."""
    d_ff, experts = spec.ffn.config.expert_d_ff or spec.model.d_ff, range(spec.ffn.config.n_experts)
    at = f"{theirs}.experts"
    return [
        same(f"{ours}.router.weight", f"{theirs}.gate.weight"),
        per_expert(f"{ours}.up", [(f"{at}.{e}.gate_proj.weight", f"{at}.{e}.up_proj.weight") for e in experts],
                   (d_ff, d_ff)),  # (E, 2·d_ff, d): gate, then up
        per_expert(f"{ours}.down", [(f"{at}.{e}.down_proj.weight",) for e in experts]),  # (E, d, d_ff)
    ]


FAMILY = table_family(name="qwen3_moe", title="Qwen3-MoE", architecture=ARCHITECTURE, model_type="qwen3_moe",
                      table=TABLE, rules=rules, layer_index=llama_like.LAYER_INDEX, ignored=llama_like.ignored)
