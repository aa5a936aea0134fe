"""The mixture-of-experts FFN: route, group tokens by expert, one grouped matmul up and one down, combine."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from blockspec.plugin import FeedForward, tap
from blockspec_moe.grouped import grouped_linear


class SharedExperts(FeedForward):
    """The always-applied dense expert(s): n_shared experts fused into one FFN of n_shared·d_ff (the core's
    dense FFN), optionally scaled by a learned sigmoid gate per token."""

    init_roles: ClassVar[Mapping[str, str]] = {  # drawn by the spec's [init], as the dense FFN's
        "up.weight": "std", "up.bias": "zero", "down.weight": "residual", "down.bias": "zero", "gate.weight": "std",
    }

    def __init__(self, *, d_model: int, d_ff: int, activation: nn.Module, bias: bool, gate: bool) -> None:
        super().__init__(d_model=d_model, d_ff=d_ff, activation=activation, bias=bias)
        self.gate = nn.Linear(d_model, 1, bias=False) if gate else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.down(self.act(self.up(x)))  # untapped: the mixture shows the shared experts as one stage
        return y if self.gate is None else torch.sigmoid(self.gate(x)) * y


class RoutingRule(NamedTuple):
    """How the router's logits choose and weigh experts beyond top-k of a softmax (DeepSeek V3's defaults
    differ from Mixtral's in each): ``scoring`` "softmax" or "sigmoid"; the experts split into ``n_group``
    groups, a token choosing among the ``topk_group`` groups whose two best scores sum highest; the chosen
    weights times ``routed_scaling``; ``correction`` (E,) added to the scores for the choice only, moved by
    ``balance_rate`` after each training step towards an even load (aux-loss-free balancing)."""

    scoring: Literal["softmax", "sigmoid"] = "softmax"
    n_group: int = 1
    topk_group: int = 1
    routed_scaling: float = 1.0
    correction: bool = False
    balance_rate: float = 0.0


class MixtureOfExperts(nn.Module):
    """Top-k routed experts (and shared ones) in place of the dense FFN: (B, N, d) -> (B, N, d).

    Weights, in Hugging Face Mixtral's layout: ``router.weight`` (E, d) (Mixtral's ``gate``),
    ``up`` (E, k·d_ff, d) (Mixtral's w1 then w3: gate half first, as the gated activations split),
    ``down`` (E, d, d_ff) (w2), with k = 2 for a gated activation and 1 otherwise; ``up_bias``
    (E, k·d_ff) and ``down_bias`` (E, d) when the spec has biases; ``router.bias`` (E,) with ``router_bias``
    (gpt-oss); the buffer ``correction`` (E,) with a ``RoutingRule`` that has one (DeepSeek V3's
    e_score_correction_bias).

    After each forward in training mode ``aux_loss`` holds the load-balancing loss
    E·Σ_e f_e·P_e (f_e: the share of routed assignments that went to expert e, P_e: the mean
    router probability of e), and ``aux_loss_coef`` its weight; in eval mode ``aux_loss`` is None.
    """

    # drawn by the spec's [init] as the dense FFN's linears are (the shared experts declare their own)
    init_roles: ClassVar[Mapping[str, str]] = {
        "router.weight": "std", "router.bias": "zero", "up": "std", "up_bias": "zero", "down": "residual",
        "down_bias": "zero",
    }

    def __init__(self, *, d_model: int, d_ff: int, n_experts: int, top_k: int, renormalize: bool,
                 activation: nn.Module, bias: bool, n_shared_experts: int = 0,
                 shared_activation: nn.Module | None = None, shared_gate: bool = False,
                 aux_loss_coef: float = 0.0, n_layers: int = 1, rule: RoutingRule = RoutingRule(),
                 router_bias: bool = False) -> None:
        super().__init__()
        if not 1 <= top_k <= n_experts:
            raise ValueError(f"top_k={top_k} must be between 1 and n_experts={n_experts}")
        self.n_experts, self.top_k, self.renormalize = n_experts, top_k, renormalize
        self.d_ff, self.aux_loss_coef = d_ff, aux_loss_coef
        self.aux_loss: torch.Tensor | None = None
        width = 2 * d_ff if getattr(activation, "gated", False) else d_ff
        self.router = nn.Linear(d_model, n_experts, bias=router_bias)
        self.scoring, self.n_group, self.topk_group = rule.scoring, rule.n_group, rule.topk_group
        self.routed_scaling, self.balance_rate = rule.routed_scaling, rule.balance_rate
        self.register_buffer("correction", torch.zeros(n_experts) if rule.correction else None)
        self.act = activation
        # GPT-2's initialisation, for a module built outside a spec; under one, [init] draws them (init_roles)
        self.up = nn.Parameter(torch.empty(n_experts, width, d_model))
        self.down = nn.Parameter(torch.empty(n_experts, d_model, d_ff))
        nn.init.normal_(self.up, std=0.02)
        nn.init.normal_(self.down, std=0.02 / math.sqrt(2 * max(n_layers, 1)))
        self.up_bias = nn.Parameter(torch.zeros(n_experts, width)) if bias else None
        self.down_bias = nn.Parameter(torch.zeros(n_experts, d_model)) if bias else None
        self.shared = None
        if n_shared_experts > 0:
            if shared_activation is None:
                raise TypeError("shared experts need their own activation module (shared_activation)")
            self.shared = SharedExperts(d_model=d_model, d_ff=n_shared_experts * d_ff, activation=shared_activation,
                                        bias=bias, gate=shared_gate)

    @property
    def tap_ops(self) -> dict[str, str]:
        """Each tap's op text for ``blockspec trace``, from this mixture's own sizes."""
        weighting = "renormalised routing weights" if self.renormalize else "routing probabilities"
        return {
            "router": "router(x): d -> {router.out_features} expert logits",
            "experts": f"top-{self.top_k} of {self.n_experts} experts of {{act}}, summed by {weighting}",
            "shared": "shared experts: {shared}" + (", sigmoid-gated" if getattr(self.shared, "gate", None) else ""),
        }

    def active_parameters(self) -> int:
        """What one token passes through (``blockspec.plugin.ActiveParameters``): the router, its top_k routed
        experts and the shared ones; the other n_experts - top_k experts sit idle for it."""
        routed = [self.up, self.down, self.up_bias, self.down_bias]  # each (E, ...): one slice per expert
        per_expert = sum(p[0].numel() for p in routed if p is not None)
        return sum(p.numel() for p in self.parameters()) - (self.n_experts - self.top_k) * per_expert

    def extra_repr(self) -> str:
        return f"n_experts={self.n_experts}, top_k={self.top_k}, renormalize={self.renormalize}, d_ff={self.d_ff}"

    def routing(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Router logits (T, E) -> weights (T, k) in the logits' dtype, expert ids (T, k), probabilities (T, E)
        (sigmoid scores: each token's scores over their sum, for the balancing loss)."""
        wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
        scores = torch.sigmoid(wide) if self.scoring == "sigmoid" else torch.softmax(wide, dim=-1)
        choice = scores if self.correction is None else scores + self.correction.to(scores.dtype)
        index = torch.topk(self._within_groups(choice), self.top_k, dim=-1).indices  # (T, k)
        weights = scores.gather(-1, index)  # (T, k): the scores themselves, never the corrected ones
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        if self.routed_scaling != 1.0:
            weights = weights * self.routed_scaling
        probs = scores / scores.sum(dim=-1, keepdim=True) if self.scoring == "sigmoid" else scores
        return weights.to(logits.dtype), index, probs

    def _within_groups(self, choice: torch.Tensor) -> torch.Tensor:
        """choice (T, E) with every expert outside the token's topk_group best groups at -inf; a group's score
        is the sum of its two best experts' (DeepSeek V3). One group: unchanged."""
        if self.n_group == 1:
            return choice
        grouped = choice.view(choice.shape[0], self.n_group, -1)  # (T, G, E/G)
        best = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(dim=-1)  # (T, G)
        kept = torch.zeros_like(best, dtype=torch.bool).scatter_(1, best.topk(self.topk_group, dim=-1).indices, True)
        return grouped.masked_fill(~kept[..., None], float("-inf")).view_as(choice)  # (T, G, E/G) -> (T, E)

    def rebalance(self, counts: torch.Tensor) -> None:
        """Aux-loss-free balancing (DeepSeek V3): each expert's correction moves by balance_rate, up when it got
        fewer assignments than the mean, down when more; no gradient is involved."""
        if self.correction is None or self.balance_rate == 0.0:
            return
        with torch.no_grad():
            load = counts.to(self.correction.dtype)
            self.correction.add_(self.balance_rate * torch.sign(load.mean() - load))

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        """Expert ``e`` alone on tokens (T, d) -> (T, d)."""
        up_bias = None if self.up_bias is None else self.up_bias[e]
        down_bias = None if self.down_bias is None else self.down_bias[e]
        return F.linear(self.act(F.linear(x, self.up[e], up_bias)), self.down[e], down_bias)

    def shared_output(self, x: torch.Tensor) -> torch.Tensor:
        """What the shared experts add (zeros without any): (..., d) -> (..., d)."""
        return torch.zeros_like(x) if self.shared is None else self.shared(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])  # (T, d)
        logits = self.router(flat)  # (T, E)
        tap(self, "router", logits.view(*shape[:-1], self.n_experts))
        weights, index, probs = self.routing(logits)  # (T, k), (T, k), (T, E)
        out, counts = self._dispatch(flat, weights, index)
        out = tap(self, "experts", out.view(shape))  # (B, N, d): a stage in the stream's terms, as every other
        train = self.training and flat.shape[0] > 0
        self.aux_loss = self.balancing_loss(probs, counts) if train else None
        if train:
            self.rebalance(counts)
        if self.shared is not None:
            out = out + tap(self, "shared", self.shared(x))  # (B, N, d): position-wise, so no flattening
        return out

    def balancing_loss(self, probs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """The Switch/Mixtral load-balancing loss E·Σ_e f_e·P_e from the router's probabilities (T, E) and each
        expert's assignment count (E,): f_e carries no gradient, P_e (the mean probability) carries it to the
        router."""
        share = counts.to(probs.dtype) / probs.shape[0]  # f_e: sums to top_k
        return self.n_experts * (share * probs.mean(dim=0)).sum()

    def _dispatch(self, flat: torch.Tensor, weights: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Group the T·k (token, expert) assignments by expert: one sort, one gather, one grouped matmul each
        way. Every shape here is fixed by T, k and E, never by the routing, so the layer compiles whole."""
        assigned = index.reshape(-1)  # (T·k,)
        experts, order = assigned.sort(stable=True)  # (T·k,) each: the assignments expert by expert
        counts = assigned.new_zeros(self.n_experts).scatter_add_(0, assigned, torch.ones_like(assigned))  # (E,)
        ends = counts.cumsum(0, dtype=torch.int32)  # (E,): where each expert's rows end
        tokens = order // self.top_k  # the token of each sorted assignment
        grouped = flat.index_select(0, tokens)  # (T·k, d), expert by expert
        hidden = grouped_linear(grouped, self.up, ends)  # (T·k, k·d_ff)
        if self.up_bias is not None:
            hidden = hidden + self.up_bias.index_select(0, experts).to(hidden.dtype)
        y = grouped_linear(self.act(hidden).contiguous(), self.down, ends)  # (T·k, d)
        if self.down_bias is not None:
            y = y + self.down_bias.index_select(0, experts).to(y.dtype)
        y = y * weights.reshape(-1)[order].unsqueeze(-1).to(y.dtype)
        # under autocast the experts' outputs are bfloat16 while the residual stream stays float32
        return torch.zeros_like(flat).index_add_(0, tokens, y.to(flat.dtype)), counts  # (T, d)
