"""blockspec-moe: the ``ffn:moe`` component, a sparse mixture of experts (Mixtral, Qwen2-MoE).

A linear router scores each token against ``n_experts`` experts; the token goes to its ``top_k``
best, weighted by their softmax probabilities (renormalised to sum to 1 when ``renormalize``), and
``n_shared_experts`` dense experts, optionally gated by a sigmoid, see every token. Each expert is
the spec's dense FFN shape: up-project (2·d_ff for a gated activation), the spec's activation,
down-project. Training adds ``aux_loss_coef`` times the Switch/Mixtral load-balancing loss.
"""

from __future__ import annotations

from attrs import field, frozen

from blockspec.plugin import BuildContext, Register, at_least, hookimpl, in_range, positive

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
    """

    n_experts: int = field(default=4, validator=positive)
    top_k: int = field(default=2, validator=_top_k_within_experts)
    renormalize: bool = True
    n_shared_experts: int = field(default=0, validator=at_least(0))
    shared_gate: bool = False
    expert_d_ff: int | None = field(default=None, validator=positive)
    aux_loss_coef: float = field(default=0.01, validator=at_least(0.0))


def build_moe(config: MoEConfig, ctx: BuildContext):
    from blockspec_moe.modules import MixtureOfExperts

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
    )


@hookimpl
def blockspec_register(register: Register) -> None:
    register("ffn", "moe", MoEConfig, build_moe, promises=("position_wise", "mixture", "aux_loss", "compiles"))
