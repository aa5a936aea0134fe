"""Mixtral (MixtralForCausalLM): config.json keys, export checks and weight names.

Mistral's attention (separate q, k, v, as Llama) with every FFN a sparse mixture of SwiGLU
experts, blockspec-moe's ``ffn:moe``: the router (``gate``) scores the experts, a softmax picks
the top ``num_experts_per_tok``, whose weights are renormalised to sum to 1, as blockspec's
``renormalize = true``. The files keep each expert apart (``block_sparse_moe.experts.j.w1/w2/w3``,
as transformers 5 still saves them; it fuses them only in memory); blockspec stacks them:
``up`` (E, 2·d_ff, d) is each expert's w1 then w3, ``down`` (E, d, d_ff) its w2.
"""

from __future__ import annotations

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader, rope
from blockspec.interop.config_table import Document, Key, mapped, table_family
from blockspec.interop.families import llama_like
from blockspec.interop.family import SOFTMAX_TOP_K, moe_option_misfits
from blockspec.interop.weight_map import Rule, per_expert, same

ARCHITECTURE = "MixtralForCausalLM"
DEFAULT_BASE = 1e6  # MixtralConfig's rope_theta when config.json gives none


def _refuse_jitter(r: ConfigReader, document: Document, title: str) -> None:
    """router_jitter_noise, multiplicative noise on the router's input while training, has no blockspec
    counterpart: refused unless 0, so that fine-tuning the import trains what the original would."""
    jitter = r.get("router_jitter_noise", float, 0.0)
    if jitter:
        r.problem("router_jitter_noise", f"router jitter ({jitter}) is not supported",
                  "blockspec-moe adds no noise while training; set it to 0.0 (eval logits do not depend on it)")


def _positional(r: ConfigReader, document: Document, title: str) -> None:
    positional = rope(r)
    parameters = r.config.get("rope_parameters")
    in_table = isinstance(parameters, dict) and parameters.get("rope_theta") is not None
    if not in_table and r.config.get("rope_theta") is None:
        positional["base"] = DEFAULT_BASE
    llama_like.top_level_fraction(r, positional.get("fraction", 1.0))
    document["positional"] = llama_like.refuse_fraction(r, positional, title)


def _routing_misfits(spec: ModelSpec) -> list[str]:
    """blockspec-moe's ffn as Mixtral routes: renormalised softmax top-k, routed experts of intermediate_size only
    (none of DeepSeek's or gpt-oss's options)."""
    expected = {**SOFTMAX_TOP_K, "renormalize": True, "expert_d_ff": None}
    return moe_option_misfits(spec, expected, "Mixtral renormalises a softmax top-k over routed experts of "
                                               "intermediate_size alone")


TABLE = llama_like.BASE.but(
    llama_like.head_dim(always=False), llama_like.rms_norm_eps(1e-5), llama_like.rope_key(_positional),
    llama_like.sliding_window(None),
    mapped("num_local_experts", "ffn.n_experts", int, 8, ffn="moe"),
    mapped("num_experts_per_tok", "ffn.top_k", int, 2),
    # router_aux_loss_coef weighs the load-balancing loss in training only; transformers adds it only with
    # output_router_logits and over all layers at once, blockspec-moe per layer, summed
    mapped("router_aux_loss_coef", "ffn.aux_loss_coef", float, 0.001),
    Key(name="router_jitter_noise", read=_refuse_jitter, write=lambda spec: {"router_jitter_noise": 0.0},
        misfits=_routing_misfits),
    frame={"ffn": {"use": "moe", "renormalize": True}},
)


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec) -> list[Rule]:
    return llama_like.rules(spec, mlp=_experts, mlp_name="block_sparse_moe")


def _experts(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    """The router (gate), and each expert's w1, w3 and w2 stacked into blockspec-moe's up and down."""
    d_ff, experts = spec.model.d_ff, range(spec.ffn.config.n_experts)
    return [
        same(f"{ours}.router.weight", f"{theirs}.gate.weight"),
        per_expert(f"{ours}.up", [(f"{theirs}.experts.{e}.w1.weight", f"{theirs}.experts.{e}.w3.weight")
                                  for e in experts], (d_ff, d_ff)),  # (E, 2·d_ff, d): gate w1, then w3
        per_expert(f"{ours}.down", [(f"{theirs}.experts.{e}.w2.weight",) for e in experts]),  # (E, d, d_ff)
    ]


FAMILY = table_family(name="mixtral", title="Mixtral", architecture=ARCHITECTURE, model_type="mixtral",
                      table=TABLE, rules=rules, layer_index=llama_like.LAYER_INDEX, ignored=llama_like.ignored)
