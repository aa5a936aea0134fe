"""blockspec-moe: the ``ffn:moe`` component, a sparse mixture of experts (Mixtral, Qwen2-MoE).

A linear router scores each token against ``n_experts`` experts; the token goes to its ``top_k``
best, weighted by their softmax probabilities (renormalised to sum to 1 when ``renormalize``), and
``n_shared_experts`` dense experts, optionally gated by a sigmoid, see every token. Each expert is
the spec's dense FFN shape: up-project (2·d_ff for a gated activation), the spec's activation,
down-project. Training adds ``aux_loss_coef`` times the Switch/Mixtral load-balancing loss.
"""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen

from blockspec.plugin import (OMIT_DEFAULT, BuildContext, FieldError, Register, at_least, greater_than, hookimpl,
                              in_range, positive)

BLOCKSPEC_API = 1


def _top_k_within_experts(instance, attribute, value) -> None:
    """1 <= top_k <= n_experts, reported at $.ffn.top_k."""
    in_range(1, max(instance.n_experts, 1), high_open=False)(instance, attribute, value)


@frozen(kw_only=True)
class MoEConfig:
    """A sparse mixture of experts: each token goes to its top_k of n_experts FFNs (plus shared experts).

    n_experts: how many routed experts, each the dense FFN's shape with the spec's [activation].
    top_k: how many experts each token goes to, weighted by the top-k softmax probabilities.
    renormalize: the top-k weights sum to 1 (Mixtral: true; Qwen2-MoE's norm_topk_prob = false).
    n_shared_experts: always-applied experts beside the routed ones.
    shared_gate: sigmoid(gate(x)) scales the shared experts' output (Qwen2-MoE).
    expert_d_ff: each expert's hidden width; none: the spec's d_ff.
    aux_loss_coef: training adds this times the load-balancing loss.

    DeepSeek V3's routing, each off by default: scoring "sigmoid" (each expert's score on its own, not a
    softmax over them); n_group groups of experts, a token choosing among its topk_group best groups (scored
    by their two best experts); routed_scaling multiplies the chosen weights; correction_bias, a per-expert
    bias added to the scores for the choice only, which balance_rate moves after each training step towards
    an even load (aux-loss-free balancing; DeepSeek V3: 0.001). router_bias: the router has a bias (gpt-oss).
    """

    n_experts: int = field(default=4, validator=positive)
    top_k: int = field(default=2, validator=_top_k_within_experts)
    renormalize: bool = True
    n_shared_experts: int = field(default=0, validator=at_least(0))
    shared_gate: bool = False
    expert_d_ff: int | None = field(default=None, validator=positive)
    aux_loss_coef: float = field(default=0.01, validator=at_least(0.0))
    scoring: Literal["softmax", "sigmoid"] = field(default="softmax", metadata=OMIT_DEFAULT)
    n_group: int = field(default=1, validator=positive, metadata=OMIT_DEFAULT)
    topk_group: int = field(default=1, validator=positive, metadata=OMIT_DEFAULT)
    routed_scaling: float = field(default=1.0, validator=greater_than(0.0), metadata=OMIT_DEFAULT)
    correction_bias: bool = field(default=False, metadata=OMIT_DEFAULT)
    balance_rate: float = field(default=0.0, validator=at_least(0.0), metadata=OMIT_DEFAULT)
    router_bias: bool = field(default=False, metadata=OMIT_DEFAULT)

    def __attrs_post_init__(self) -> None:
        errors = grouping_errors(self)
        if errors:
            raise errors[0]


def grouping_errors(config: MoEConfig) -> list[FieldError]:
    """What the group-limited routing cannot do, each at its own key (topk_group > n_group, uneven groups, fewer
    experts in the kept groups than top_k), and a balance_rate with no correction bias to move."""
    errors = []
    if config.topk_group > config.n_group:
        errors.append(FieldError("topk_group", f"expected at most n_group = {config.n_group}, found "
                                               f"{config.topk_group}"))
    elif config.n_experts % config.n_group:
        errors.append(FieldError("n_group", f"expected a divisor of n_experts = {config.n_experts}, found "
                                            f"{config.n_group}"))
    elif config.top_k > (reachable := config.topk_group * (config.n_experts // config.n_group)):
        errors.append(FieldError("top_k", f"expected at most the {reachable} experts of topk_group = "
                                          f"{config.topk_group} groups, found {config.top_k}"))
    if config.balance_rate and not config.correction_bias:
        errors.append(FieldError("balance_rate", "moves the correction bias: set correction_bias = true, or "
                                                 "balance_rate = 0"))
    return errors


def build_moe(config: MoEConfig, ctx: BuildContext):
    from blockspec_moe.modules import MixtureOfExperts, RoutingRule

    if ctx.layer is None:
        raise TypeError("ffn:moe is built per layer: its BuildContext needs a layer factory (ctx.layer)")
    if not 1 <= config.top_k <= config.n_experts:
        raise ValueError(f"ffn:moe: top_k={config.top_k} must be between 1 and n_experts={config.n_experts}")
    model = ctx.model
    shared = config.n_shared_experts > 0
    return MixtureOfExperts(
        d_model=model.d_model,
        d_ff=config.expert_d_ff if config.expert_d_ff is not None else model.d_ff,
        n_experts=config.n_experts,
        top_k=config.top_k,
        renormalize=config.renormalize,
        activation=ctx.layer.activation("act"),
        bias=model.bias,
        n_shared_experts=config.n_shared_experts,
        shared_activation=ctx.layer.activation("shared.act") if shared else None,
        shared_gate=config.shared_gate and shared,
        aux_loss_coef=config.aux_loss_coef,
        n_layers=model.n_layers,
        rule=RoutingRule(scoring=config.scoring, n_group=config.n_group, topk_group=config.topk_group,
                         routed_scaling=config.routed_scaling, correction=config.correction_bias,
                         balance_rate=config.balance_rate),
        router_bias=config.router_bias,
    )


@hookimpl
def blockspec_register(register: Register) -> None:
    register("ffn", "moe", MoEConfig, build_moe, promises=("position_wise", "mixture", "aux_loss", "compiles"))
