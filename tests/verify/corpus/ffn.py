"""FFNs: broken copies of blockspec-moe's mixture of experts and of the core's dense FFN."""

from __future__ import annotations

import blockspec_moe
import torch
from attrs import field, frozen
from blockspec_moe import MoEConfig
from blockspec_moe.modules import MixtureOfExperts, RoutingRule

from blockspec.assembly import builtin
from blockspec.assembly.builtin import DenseFFNConfig
from blockspec.modules.feed_forward import FeedForward
from blockspec.plugin import BuildContext, at_least, positive
from tests.verify.corpus import DTYPES, Corpus, declared

CORPUS = Corpus()
MOE = declared(blockspec_moe, "ffn", "moe")
DENSE = declared(builtin, "ffn", "dense")
Routing = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def moe_as(cls: type) -> object:
    """build_moe, building the mutant's class."""

    def build(config: MoEConfig, ctx: BuildContext) -> MixtureOfExperts:
        shared = config.n_shared_experts > 0
        return cls(d_model=ctx.model.d_model, d_ff=config.expert_d_ff or ctx.model.d_ff,
                   n_experts=config.n_experts, top_k=config.top_k, renormalize=config.renormalize,
                   activation=ctx.layer.activation("act"), bias=ctx.model.bias,
                   n_shared_experts=config.n_shared_experts,
                   shared_activation=ctx.layer.activation("shared.act") if shared else None,
                   shared_gate=config.shared_gate and shared, aux_loss_coef=config.aux_loss_coef,
                   n_layers=ctx.model.n_layers, router_bias=config.router_bias,
                   rule=RoutingRule(scoring=config.scoring, n_group=config.n_group, topk_group=config.topk_group,
                                    routed_scaling=config.routed_scaling, correction=config.correction_bias,
                                    balance_rate=config.balance_rate))

    return build


class Unnormalised(MixtureOfExperts):
    def routing(self, logits: torch.Tensor) -> Routing:
        probs = torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
        weights, index = torch.topk(probs, self.top_k, dim=-1)  # BUG: renormalize is never applied
        return weights.to(logits.dtype), index, probs


class TokenSoftmax(MixtureOfExperts):
    def routing(self, logits: torch.Tensor) -> Routing:
        probs = torch.softmax(logits, dim=0, dtype=torch.promote_types(logits.dtype, torch.float32))  # BUG: over tokens
        weights, index = torch.topk(probs, self.top_k, dim=-1)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(logits.dtype), index, probs


class TopKThenSoftmax(MixtureOfExperts):
    def routing(self, logits: torch.Tensor) -> Routing:
        probs = torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
        top, index = torch.topk(logits, self.top_k, dim=-1)
        weights = torch.softmax(top, dim=-1)  # BUG: a softmax over the top k: renormalised even when it must not be
        return weights.to(logits.dtype), index, probs


class WideWeights(MixtureOfExperts):
    def routing(self, logits: torch.Tensor) -> Routing:
        probs = torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
        weights, index = torch.topk(probs, self.top_k, dim=-1)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, index, probs  # float32 weights: the combination below must cast back

    def _dispatch(self, flat: torch.Tensor, weights: torch.Tensor, index: torch.Tensor):
        assigned = index.reshape(-1)  # (T·k,)
        order = assigned.argsort(stable=True)
        counts = torch.bincount(assigned, minlength=self.n_experts)  # (E,)
        tokens = order // self.top_k
        grouped = flat.index_select(0, tokens)  # (T·k, d)
        outputs = [self.expert(e, chunk) for e, chunk in enumerate(grouped.split(counts.tolist())) if chunk.shape[0]]
        y = (torch.cat(outputs) if outputs else grouped) * weights.reshape(-1)[order].unsqueeze(-1)
        return y.new_zeros(flat.shape).index_add_(0, tokens, y), counts  # BUG: summed in float32, never cast back


class GatherModulo(MixtureOfExperts):
    def _dispatch(self, flat: torch.Tensor, weights: torch.Tensor, index: torch.Tensor):
        assigned = index.reshape(-1)  # (T·k,)
        order = assigned.argsort(stable=True)
        counts = torch.bincount(assigned, minlength=self.n_experts)  # (E,)
        tokens = order % self.top_k  # BUG: the assignment's slot, not its token (order // top_k)
        grouped = flat.index_select(0, tokens)  # (T·k, d)
        outputs = [self.expert(e, chunk) for e, chunk in enumerate(grouped.split(counts.tolist())) if chunk.shape[0]]
        y = torch.cat(outputs) * weights.reshape(-1)[order].unsqueeze(-1)
        return torch.zeros_like(flat).index_add_(0, tokens, y), counts  # (T, d)


def scored(module: MixtureOfExperts, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The scores (T, E), softmax or sigmoid as the module says, and the corrected ones the choice reads."""
    wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
    scores = torch.sigmoid(wide) if module.scoring == "sigmoid" else torch.softmax(wide, dim=-1)
    return scores, scores if module.correction is None else scores + module.correction.to(scores.dtype)


class CorrectedWeights(MixtureOfExperts):
    def routing(self, logits: torch.Tensor) -> Routing:
        scores, choice = scored(self, logits)
        index = torch.topk(self._within_groups(choice), self.top_k, dim=-1).indices
        weights = choice.gather(-1, index)  # BUG: the weights read the corrected scores, which only choose
        weights = weights / weights.sum(dim=-1, keepdim=True) if self.renormalize else weights
        return (weights * self.routed_scaling).to(logits.dtype), index, scores


class ScaledThenRenormalised(MixtureOfExperts):
    def routing(self, logits: torch.Tensor) -> Routing:
        scores, choice = scored(self, logits)
        index = torch.topk(self._within_groups(choice), self.top_k, dim=-1).indices
        weights = scores.gather(-1, index) * self.routed_scaling
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)  # BUG: the renormalisation undoes the scaling
        return weights.to(logits.dtype), index, scores


CORPUS.mutant("ffn", "moe_corrected_weights", MoEConfig, moe_as(CorrectedWeights), like=MOE,
              catches="mixture_routing",
              bug="the weights read the bias-corrected scores, which DeepSeek V3 uses for the choice alone")
CORPUS.mutant("ffn", "moe_scaled_then_renormalised", MoEConfig, moe_as(ScaledThenRenormalised), like=MOE,
              catches="mixture_routing", bug="routed_scaling applied before the renormalisation, which undoes it")
CORPUS.mutant("ffn", "moe_unnormalised", MoEConfig, moe_as(Unnormalised), like=MOE, catches="mixture_routing",
              bug="renormalize = true is ignored: the top-k weights do not sum to 1")
CORPUS.mutant("ffn", "moe_token_softmax", MoEConfig, moe_as(TokenSoftmax), like=MOE, catches="mixture_routing",
              bug="the router's softmax over dim 0, the tokens, instead of the experts")
CORPUS.mutant("ffn", "moe_top_k_then_softmax", MoEConfig, moe_as(TopKThenSoftmax), like=MOE,
              catches="mixture_routing", bug="softmax over the top-k logits: always renormalised")
CORPUS.mutant("ffn", "moe_wide_weights", MoEConfig, moe_as(WideWeights), like=MOE, catches=DTYPES,
              bug="routing weights in float32 and the experts summed in them: half-precision tokens come out float32")
CORPUS.mutant("ffn", "moe_gather_modulo", MoEConfig, moe_as(GatherModulo), like=MOE, catches="mixture_sum",
              bug="assignments mapped to tokens by order % top_k instead of order // top_k")


class SequenceFirst(FeedForward):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq_first = x.transpose(0, 1)  # (N, B, d): written for fairseq's sequence-first layout
        out = self.down(self.act(self.up(seq_first)))  # (N, B, d)
        return out.reshape(x.shape)  # BUG: (N, B, d) read back as (B, N, d) without the transpose


class PlainList(FeedForward):
    def __init__(self, *, d_model: int, d_ff: int, activation: torch.nn.Module, bias: bool) -> None:
        super().__init__(d_model=d_model, d_ff=d_ff, activation=activation, bias=bias)
        self.linears = [self.up, self.down]  # BUG: a plain list, not an nn.ModuleList, holds the two linears
        del self.up, self.down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up, down = self.linears
        return down(self.act(up(x)))


def dense_as(cls: type) -> object:
    def build(config: DenseFFNConfig, ctx: BuildContext) -> FeedForward:
        m = ctx.model
        return cls(d_model=m.d_model, d_ff=m.d_ff, activation=ctx.layer.activation("act"), bias=m.bias)

    return build


CORPUS.mutant("ffn", "dense_sequence_first", DenseFFNConfig, dense_as(SequenceFirst), like=DENSE,
              catches="position_wise", bug="computed sequence-first and reshaped back without the transpose")
CORPUS.mutant("ffn", "dense_plain_list", DenseFFNConfig, dense_as(PlainList), like=DENSE, catches="state_dict",
              bug="the linears kept in a plain list: absent from state_dict(), parameters() and .to()")


# --- mixtures of experts as outside authors write them (issue 27): a Switch router over a ModuleList, and
# the load-balancing loss -------------------------------------------------------------------------------

@frozen(kw_only=True)
class SwitchConfig:
    """A Switch Transformer layer: each token goes to its one best expert (no top_k field: top-1)."""

    n_experts: int = field(default=4, validator=positive)
    aux_loss_coef: float = field(default=0.01, validator=at_least(0.0))


SWITCH = ("position_wise", "mixture", "aux_loss")


class SwitchMoE(torch.nn.Module):
    """Top-1 routing over an nn.ModuleList of dense FFNs, each token weighted by its expert's probability."""

    def __init__(self, *, d_model: int, d_ff: int, n_experts: int, layer, bias: bool, aux_loss_coef: float) -> None:
        super().__init__()
        self.router = torch.nn.Linear(d_model, n_experts, bias=False)
        act = layer.activation("act")  # one activation module, shared by the experts
        self.experts = torch.nn.ModuleList(FeedForward(d_model=d_model, d_ff=d_ff, activation=act, bias=bias)
                                           for _ in range(n_experts))
        self.aux_loss_coef, self.aux_loss = aux_loss_coef, None

    def routing(self, logits: torch.Tensor) -> Routing:
        """(T, E) -> the best expert's probability (T, 1), its id (T, 1), the probabilities (T, E)."""
        probs = torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
        weights, index = probs.max(dim=-1, keepdim=True)
        return weights.to(logits.dtype), index, probs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])  # (B, N, d) -> (T, d)
        weights, index, probs = self.routing(self.router(flat))
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows = (index[:, 0] == e).nonzero().squeeze(-1)  # the tokens routed to e
            if rows.numel():
                out.index_add_(0, rows, weights[rows] * expert(flat[rows]))
        self.aux_loss = self.balancing_loss(probs, index) if self.training and flat.shape[0] else None
        return out.view(x.shape)  # (T, d) -> (B, N, d)

    def balancing_loss(self, probs: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Switch's E·Σ_e f_e·P_e: f_e the share of tokens sent to e, P_e e's mean probability."""
        share = torch.bincount(index[:, 0], minlength=len(self.experts)).to(probs.dtype) / probs.shape[0]
        return len(self.experts) * (share * probs.mean(dim=0)).sum()


def switch_as(cls: type) -> object:
    def build(config: SwitchConfig, ctx: BuildContext) -> SwitchMoE:
        return cls(d_model=ctx.model.d_model, d_ff=ctx.model.d_ff, n_experts=config.n_experts, layer=ctx.layer,
                   bias=ctx.model.bias, aux_loss_coef=config.aux_loss_coef)

    return build


class SwitchArgmin(SwitchMoE):
    def routing(self, logits: torch.Tensor) -> Routing:
        probs = torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
        weights, index = probs.min(dim=-1, keepdim=True)  # BUG: the least likely expert, not the best
        return weights.to(logits.dtype), index, probs


class SwitchAuxFromIndices(SwitchMoE):
    def balancing_loss(self, probs: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        share = torch.bincount(index[:, 0], minlength=len(self.experts)).to(probs.dtype) / probs.shape[0]
        return len(self.experts) * (share * share).sum()  # BUG: P_e read off the top-1 ids: no gradient


class AuxDetached(MixtureOfExperts):
    def balancing_loss(self, probs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return super().balancing_loss(probs.detach(), counts)  # BUG: the probabilities detached from the router


class DenseDispatch(MixtureOfExperts):
    """Every expert on every token, combined by a sparse (T, E) weight matrix: a dense-dispatch mixture."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])  # (B, N, d) -> (T, d)
        weights, index, probs = self.routing(self.router(flat))  # (T, k), (T, k), (T, E)
        # BUG: the (T, E) combination holds the raw top-k probabilities, not the renormalised weights
        dense = torch.zeros_like(probs).scatter(1, index, probs.gather(1, index))
        every = torch.stack([self.expert(e, flat) for e in range(self.n_experts)], dim=1)  # (T, E, d)
        out = (dense.to(flat.dtype)[..., None] * every).sum(1) + self.shared_output(flat)  # (T, d)
        counts = torch.bincount(index.reshape(-1), minlength=self.n_experts)
        self.aux_loss = self.balancing_loss(probs, counts) if self.training and flat.shape[0] else None
        return out.view(x.shape)  # (T, d) -> (B, N, d)


CORPUS.correct("ffn", "switch_moe_list", SwitchConfig, switch_as(SwitchMoE), promises=SWITCH,
               why="a Switch (top-1) mixture over an nn.ModuleList of experts, with no top_k field")
CORPUS.mutant("ffn", "switch_argmin", SwitchConfig, switch_as(SwitchArgmin), like=SWITCH, catches="mixture_routing",
              bug="top-1 routing by argmin: every token goes to its least likely expert")
CORPUS.mutant("ffn", "switch_aux_from_indices", SwitchConfig, switch_as(SwitchAuxFromIndices), like=SWITCH,
              catches="aux_loss", bug="the balancing loss computed from the top-1 ids alone: no gradient to the router")
CORPUS.mutant("ffn", "moe_aux_detached", MoEConfig, moe_as(AuxDetached), like=MOE, catches="aux_loss",
              bug="the balancing loss computed from detached router probabilities")
CORPUS.mutant("ffn", "moe_dense_unrenormalised", MoEConfig, moe_as(DenseDispatch), like=MOE, catches="mixture_sum",
              bug="dense dispatch combining the experts by the raw top-k probabilities, renormalize forgotten")


# --- issue 27: shared experts (drawn once integer options off by default are drawn on) and router jitter ----

class SharedTwice(MixtureOfExperts):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)  # routed experts plus the shared ones ...
        return out if self.shared is None else out + self.shared(x)  # BUG: ... and the shared ones once more


class JitterInEval(MixtureOfExperts):
    """Switch Transformer's router jitter: the router's logits scaled by noise in [1 - ε, 1 + ε] (ε = 0.01)."""

    def routing(self, logits: torch.Tensor) -> Routing:
        jittered = logits * torch.empty_like(logits).uniform_(0.99, 1.01)  # BUG: no self.training check
        return super().routing(jittered)


CORPUS.mutant("ffn", "moe_shared_twice", MoEConfig, moe_as(SharedTwice), like=MOE, catches="mixture_sum",
              bug="the shared experts' output added twice: only seen with n_shared_experts >= 1 (default 0)")
CORPUS.mutant("ffn", "moe_jitter_in_eval", MoEConfig, moe_as(JitterInEval), like=MOE,
              catches="eval_is_deterministic", bug="router jitter noise applied in eval mode too")
