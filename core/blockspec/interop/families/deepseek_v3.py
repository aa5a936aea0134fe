"""DeepSeek V3 (DeepseekV3ForCausalLM; DeepSeek-R1 and Kimi K2 share it): config.json keys and weight names.

Multi-head latent attention (blockspec-attention's ``mla``: q through ``q_a_proj``, ``q_a_layernorm`` and
``q_b_proj``, or one ``q_proj``; the latent and the shared rotary key from ``kv_a_proj_with_mqa`` and
``kv_a_layernorm``; keys and values from ``kv_b_proj``), RoPE on the ``qk_rope_head_dim`` features
(``[model] head_dim``), interleaved when ``rope_interleave``. Every FFN past the first
``first_k_dense_replace`` layers is blockspec-moe's DeepSeek routing: sigmoid scores plus
``e_score_correction_bias`` choose among the ``topk_group`` best of ``n_group`` groups, the weights are the
scores, renormalised (``norm_topk_prob``) and times ``routed_scaling_factor``, beside ``n_shared_experts``.
A YaRN ``mscale_all_dim`` scales the softmax by mscale² (transformers' ``yarn_apply_mscale``): the
``[attention] query_scale``. The files keep each expert apart (``mlp.experts.j.gate_proj``, ...).
"""

from __future__ import annotations

import math
import re
from typing import Any

from blockspec.interop.config_reader import ConfigReader, rope_json
from blockspec.interop.config_table import Document, Key, accepted, fixed, mapped, put, table_family
from blockspec.interop.families import llama_like
from blockspec.interop.family import dense_layers, moe_option_misfits
from blockspec.interop.weight_map import Rule, per_expert, same, stacked
from blockspec.spec.schema import ModelSpec

ARCHITECTURE = "DeepseekV3ForCausalLM"
LATENT_NORM_EPS = 1e-6  # DeepseekV3RMSNorm's default, which q_a_layernorm and kv_a_layernorm keep
MLA_KEYS = (("kv_lora_rank", "kv_lora_rank", 512), ("qk_nope_head_dim", "nope_head_dim", 128),
            ("v_head_dim", "v_head_dim", 128))  # config key, [attention] option, DeepseekV3Config's default
# the blockspec-moe options DeepSeek V3's config.json has no key for, each with its one value
ROUTING = {"scoring": "sigmoid", "correction_bias": True, "router_bias": False, "balance_rate": 0.0}


# ---------------------------------------------------------------- the table


def _attention(r: ConfigReader, document: Document, title: str) -> None:
    """The latent attention's sizes; q_lora_rank null means one full q projection."""
    attention = document["attention"]
    for key, option, default in MLA_KEYS:
        attention[option] = r.get(key, int, default)
    attention["q_lora_rank"] = llama_like.nullable(r, "q_lora_rank", int, 1536)
    put(document, "model.head_dim", r.get("qk_rope_head_dim", int, 64))
    heads, kv = document["model"]["n_heads"], r.get("num_key_value_heads", int, None)
    if kv is not None and heads is not None and kv != heads:
        r.problem("num_key_value_heads", f"{kv} differs from num_attention_heads = {heads}",
                  "every head of the latent attention reads the one latent; transformers repeats keys otherwise")
    rope_dim, nope = document["model"]["head_dim"], attention["nope_head_dim"]
    if rope_dim is None or nope is None:
        return  # refused where read: nothing is derived from it
    for derived, value in (("head_dim", rope_dim), ("qk_head_dim", nope + rope_dim)):
        _derived(r, derived, value)
    _query_scale(r, document)


def _query_scale(r: ConfigReader, document: Document) -> None:
    """YaRN's mscale_all_dim scales the softmax by mscale² (transformers' yarn_apply_mscale)."""
    positional, all_dim = document["positional"], _rope_entry(r, "mscale_all_dim")
    if positional.get("scaling") == "yarn" and all_dim and positional.get("factor") is not None:
        factor, qk = positional["factor"], document["attention"]["nope_head_dim"] + document["model"]["head_dim"]
        mscale = 0.1 * all_dim * math.log(factor) + 1.0 if factor > 1 else 1.0
        document["attention"]["query_scale"] = qk**-0.5 * mscale * mscale


def _derived(r: ConfigReader, key: str, value: int) -> None:
    """A key transformers derives and writes beside the ones it comes from: harmless when it agrees."""
    given = r.get(key, int, None)
    if given is not None and given != value:
        r.problem(key, f"{given} differs from {value}, what transformers derives it as", "remove it")


def _attention_json(spec: ModelSpec) -> dict[str, Any]:
    c, m = spec.attention.config, spec.model
    return {"kv_lora_rank": c.kv_lora_rank, "q_lora_rank": c.q_lora_rank, "qk_nope_head_dim": c.nope_head_dim,
            "v_head_dim": c.v_head_dim, "qk_rope_head_dim": m.head_dim, "num_key_value_heads": m.n_heads,
            "head_dim": m.head_dim, "qk_head_dim": c.nope_head_dim + m.head_dim}


def _positional(r: ConfigReader, document: Document, title: str) -> None:
    """rope(r) on the rotary part, interleaved as DeepSeek lays it out (rope_interleave)."""
    positional = llama_like.full_rope(r, title)
    positional["layout"] = "interleaved" if r.get("rope_interleave", bool, True) else "half"
    document["positional"] = positional


def _rope_entry(r: ConfigReader, key: str) -> float:
    """One entry of the rope table transformers reads (rope_scaling before rope_parameters), 0 when absent."""
    for name in ("rope_scaling", "rope_parameters"):
        table = r.config.get(name)
        if isinstance(table, dict) and table:
            return float(table.get(key) or 0.0)
    return 0.0


def _positional_json(spec: ModelSpec) -> dict[str, Any]:
    """rope_json, rope_interleave, and the query scale as the mscale_all_dim that gives it (0: none)."""
    keys = rope_json(spec.positional.config)
    keys["rope_interleave"] = spec.positional.config.layout == "interleaved"
    all_dim = _mscale_all_dim(spec)
    if all_dim:
        for table in ("rope_parameters", "rope_scaling"):
            keys[table] = {**keys[table], "mscale_all_dim": all_dim, "mscale": all_dim}
    return keys


def _mscale_all_dim(spec: ModelSpec) -> float:
    """The mscale_all_dim whose mscale² times 1/√(nope + head_dim) is the spec's query_scale (0: the default)."""
    scale, rope_config = spec.attention.config.query_scale, spec.positional.config
    if scale is None or getattr(rope_config, "scaling", "none") != "yarn":
        return 0.0
    mscale = (scale * (spec.attention.config.nope_head_dim + spec.model.head_dim) ** 0.5) ** 0.5
    return (mscale - 1.0) / (0.1 * math.log(rope_config.factor))


def _scale_misfits(spec: ModelSpec) -> list[str]:
    """A query_scale the config can say (YaRN's mscale_all_dim), and latent norms of DeepSeek's eps (another
    attention is a misfit of its own)."""
    if spec.attention.name != "mla":
        return []
    config, problems = spec.attention.config, []
    if config.query_scale is not None and getattr(spec.positional.config, "scaling", "none") != "yarn":
        problems.append(f"[attention] query_scale = {config.query_scale}: the family scales scores by "
                        "1/√(qk_nope_head_dim + qk_rope_head_dim), times YaRN's mscale² only with a yarn rope")
    if config.latent_norm_eps != LATENT_NORM_EPS:
        problems.append(f"[attention] latent_norm_eps = {config.latent_norm_eps}: the family's latent norms use "
                        f"{LATENT_NORM_EPS}")
    return problems


def _first_dense(r: ConfigReader, document: Document, title: str) -> None:
    """first_k_dense_replace: a [[layers]] entry giving layers 0..k-1 the dense FFN (all of them: no MoE)."""
    first, n_layers = r.get("first_k_dense_replace", int, 3), document["model"]["n_layers"] or 0
    if first is None:
        return  # refused where read
    if first < 0:
        r.problem("first_k_dense_replace", f"{first}: expected an integer >= 0")
    elif first >= n_layers:
        document["ffn"] = {"use": "dense"}
    elif first:
        document["layers"] = [{"to": first - 1, "ffn": {"use": "dense"}}]


def _first_dense_json(spec: ModelSpec) -> dict[str, Any]:
    return {"first_k_dense_replace": len(dense_layers(spec)) if spec.ffn.name == "moe" else spec.model.n_layers}


def _routing_misfits(spec: ModelSpec) -> list[str]:
    return moe_option_misfits(spec, ROUTING, "DeepSeek V3 routes by sigmoid scores plus a correction bias, with "
                                             "no router bias, and leaves the bias to the training loop")


def _expert_width(spec: ModelSpec) -> dict[str, Any]:
    moe = spec.ffn.config
    return {"moe_intermediate_size": moe.expert_d_ff or spec.model.d_ff, "n_shared_experts": moe.n_shared_experts}


MOE_KEYS = (mapped("n_routed_experts", "ffn.n_experts", int, 256), mapped("num_experts_per_tok", "ffn.top_k", int, 8),
            mapped("n_group", "ffn.n_group", int, 8), mapped("topk_group", "ffn.topk_group", int, 4),
            mapped("routed_scaling_factor", "ffn.routed_scaling", float, 2.5),
            mapped("norm_topk_prob", "ffn.renormalize", bool, True),
            mapped("n_shared_experts", "ffn.n_shared_experts", int, 1),
            Key(name="moe_intermediate_size", read=lambda r, d, t: put(d, "ffn.expert_d_ff",
                                                                        r.get("moe_intermediate_size", int, 2048)),
                write=_expert_width, misfits=_routing_misfits, expresses={"ffn": "moe"}))

TABLE = llama_like.BASE.without("num_key_value_heads", "head_dim").but(
    Key(name="kv_lora_rank", read=_attention, write=_attention_json, expresses={"attention": "mla", "head_dim": True}),
    llama_like.rope_key(_positional, _positional_json), llama_like.rms_norm_eps(1e-6),
    fixed("attention_bias", False, "biases on the latent attention's projections are not supported"),
    *MOE_KEYS,
    Key(name="first_k_dense_replace", read=_first_dense, write=_first_dense_json, misfits=_scale_misfits,
        expresses={"dense_first": True}),
    accepted("output_router_logits"), accepted("pretraining_tp", lambda spec: 1),
    accepted("num_nextn_predict_layers"),  # the multi-token-prediction layers transformers does not build
    frame={"attention": {"use": "mla", "latent_norm_eps": LATENT_NORM_EPS},
           "ffn": {"use": "moe", "scoring": "sigmoid", "correction_bias": True, "aux_loss_coef": 0.0}},
)


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec) -> list[Rule]:
    dense = set(dense_layers(spec)) if spec.ffn.name == "moe" else set(range(spec.model.n_layers))

    def mlp(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
        index = int(ours.split(".")[1])
        return llama_like.gated_mlp_rules(spec, ours, theirs) if index in dense else _experts(spec, ours, theirs)

    return llama_like.rules(spec, attention=_latent_attention, mlp=mlp)


def _latent_attention(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    """q (q_proj, or q_a_proj, q_a_layernorm, q_b_proj), the latent (kv_a_*), kv_b_proj and o_proj as they are."""
    pairs = [("kv_down", "kv_a_proj_with_mqa"), ("kv_norm", "kv_a_layernorm"), ("kv_up", "kv_b_proj"),
             ("proj", "o_proj")]
    if spec.attention.config.q_lora_rank is None:
        pairs.append(("q_proj", "q_proj"))
    else:
        pairs += [("q_down", "q_a_proj"), ("q_latent_norm", "q_a_layernorm"), ("q_up", "q_b_proj")]
    return [same(f"{ours}.{mine}.weight", f"{theirs}.{hf}.weight") for mine, hf in pairs]


def _experts(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    """The router (gate) and its correction, each expert's gate/up/down stacked, the shared experts fused."""
    moe = spec.ffn.config
    d_ff, experts, shared = moe.expert_d_ff or spec.model.d_ff, range(moe.n_experts), moe.n_shared_experts
    found = [same(f"{ours}.router.weight", f"{theirs}.gate.weight"),
             same(f"{ours}.correction", f"{theirs}.gate.e_score_correction_bias"),
             per_expert(f"{ours}.up", [(f"{theirs}.experts.{e}.gate_proj.weight",
                                        f"{theirs}.experts.{e}.up_proj.weight") for e in experts],
                        (d_ff, d_ff)),  # (E, 2·d_ff, d): gate, then up
             per_expert(f"{ours}.down", [(f"{theirs}.experts.{e}.down_proj.weight",) for e in experts])]
    if shared:
        width, at = shared * d_ff, f"{theirs}.shared_experts"
        found += [stacked(f"{ours}.shared.up.weight", [f"{at}.gate_proj.weight", f"{at}.up_proj.weight"],
                          (width, width)),
                  same(f"{ours}.shared.down.weight", f"{at}.down_proj.weight")]
    return found


def ignored(name: str, spec: ModelSpec) -> bool:
    """The multi-token-prediction layers past num_hidden_layers, which transformers does not build either."""
    found = re.match(llama_like.LAYER_INDEX, name)
    return llama_like.ignored(name, spec) or found is not None and int(found[1]) >= spec.model.n_layers


FAMILY = table_family(name="deepseek_v3", title="DeepSeek V3", architecture=ARCHITECTURE, model_type="deepseek_v3",
                      table=TABLE, rules=rules, layer_index=llama_like.LAYER_INDEX, ignored=ignored)
