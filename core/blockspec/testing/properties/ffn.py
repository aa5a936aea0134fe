"""FFNs: (B, N, d) -> (B, N, d), each token on its own."""

from __future__ import annotations

import copy

import attrs
import torch
from torch import nn

from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.harness import assume, build_isolated, exercise, generator, normal
from blockspec.testing.properties.base import (
    LEAK_DTYPES, Property, assert_close, assert_like, assert_shape, assert_unchanged,
)


def check_contract(component: Component, case: Case, device: str) -> None:
    """(B, N, d) in, (B, N, d) out, same dtype and device."""
    _, (x,), found = exercise(component, case, device)
    assert_shape(found["output"], tuple(x.shape), "ffn output")
    assert_like(found["output"], x, "ffn output")


def check_position_wise(component: Component, case: Case, device: str) -> None:
    """Each token's output is what that token alone gives: no mixing across positions (float64, trained)."""
    built, (x,), found = exercise(component, case, device)
    with torch.no_grad():
        alone = torch.cat([built.module(x[:, i:i + 1]) for i in range(x.shape[1])], dim=1)  # (B, N, d)
    assert_unchanged(found["output"], alone, "outputs against each token run alone")


# A mixture of experts ("mixture"), the contract blockspec.plugin's docstring writes down: the module has
# ``router`` (an nn.Linear, d -> E logits) and ``routing(logits) -> (weights, index, probs)``; ``top_k``
# (absent: 1, a Switch router), ``renormalize`` (absent: false) and ``shared_output(x)`` (absent: nothing
# shared). The experts are either ``experts``, a sequence of E modules each computing one expert on
# (T, d) tokens, or stacked tensors in Hugging Face Mixtral's layout: ``up`` (E, k·d_ff, d), ``down``
# (E, d, d_ff), ``up_bias`` (E, k·d_ff) / ``down_bias`` (E, d) or None, with the activation ``act``.
# Its config has ``n_experts`` (and ``top_k`` when it routes to more than one). DeepSeek V3's routing, each
# absent: Mixtral's: ``scoring`` ("softmax" or "sigmoid"), ``n_group`` / ``topk_group`` (1: no groups),
# ``routed_scaling`` (1), ``correction`` (an (E,) tensor added to the scores for the choice only; None).
EXPERT_TENSORS = ("up", "down", "up_bias", "down_bias")


def top_k(module: nn.Module) -> int:
    """How many experts each token goes to: the module's ``top_k``, 1 (a Switch router) without one."""
    return int(getattr(module, "top_k", 1))


def shared_output(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What the always-applied experts add to x (..., d): the module's ``shared_output``, or nothing."""
    shared = getattr(module, "shared_output", None)
    return torch.zeros_like(x) if shared is None else shared(x)


def dense_expert(module: nn.Module, e: int) -> nn.Module:
    """Expert ``e`` on its own: a copy of ``module.experts[e]``, or the core's dense FFN holding copies of the
    stacked weights."""
    from blockspec.modules.feed_forward import FeedForward

    if hasattr(module, "experts"):
        return copy.deepcopy(module.experts[e])
    up, down = module.up[e], module.down[e]  # (k·d_ff, d), (d, d_ff)
    dense = FeedForward(d_model=down.shape[0], d_ff=down.shape[1], activation=module.act,
                        bias=module.up_bias is not None).to(dtype=up.dtype, device=up.device)
    with torch.no_grad():
        assert_shape(dense.up.weight, tuple(up.shape), f"expert {e}'s up weight")
        dense.up.weight.copy_(up)
        dense.down.weight.copy_(down)
        if module.up_bias is not None:
            dense.up.bias.copy_(module.up_bias[e])
            dense.down.bias.copy_(module.down_bias[e])
    return dense


def naive_routing(module: nn.Module, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One token's router logits (E,) -> its top-k weights and expert ids, by the definition: scores (softmax or
    each expert's sigmoid), the choice among the experts of the best groups by the corrected scores, the
    weights the chosen scores themselves, renormalised and scaled as the module says."""
    wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
    scores = torch.sigmoid(wide) if getattr(module, "scoring", "softmax") == "sigmoid" else torch.softmax(wide, -1)
    correction = getattr(module, "correction", None)
    choice = scores if correction is None else scores + correction.to(scores.dtype)
    allowed = _in_best_groups(module, choice)
    index = torch.tensor(sorted(allowed, key=lambda e: float(choice[e]), reverse=True)[:top_k(module)])
    weights = scores[index]
    if getattr(module, "renormalize", False):
        weights = weights / weights.sum()
    return (weights * float(getattr(module, "routed_scaling", 1.0))).to(logits.dtype), index


def _in_best_groups(module: nn.Module, choice: torch.Tensor) -> list[int]:
    """The experts of the token's topk_group groups whose two best corrected scores sum highest (all experts
    when the module has no groups)."""
    n_group = int(getattr(module, "n_group", 1))
    size = choice.shape[0] // n_group
    groups = [list(range(g * size, (g + 1) * size)) for g in range(n_group)]
    best = sorted(groups, key=lambda g: sum(sorted((float(choice[e]) for e in g), reverse=True)[:2]), reverse=True)
    return [e for group in best[:int(getattr(module, "topk_group", 1))] for e in group]


def naive_mixture(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Token by token: the routing weights times each chosen expert run on its own, plus the shared part."""
    flat = x.reshape(-1, x.shape[-1])  # (B, N, d) -> (T, d)
    rows = []
    with torch.no_grad():
        experts: dict[int, nn.Module] = {}
        for token in flat:
            weights, index = naive_routing(module, module.router(token))
            row = shared_output(module, token[None])[0]
            for w, e in zip(weights, index.tolist()):
                expert = experts.setdefault(e, dense_expert(module, e))
                row = row + w * expert(token[None])[0]
            rows.append(row)
    return torch.stack(rows).view(x.shape) if rows else torch.zeros_like(x)  # (T, d) -> (B, N, d)


def check_mixture_sum(component: Component, case: Case, device: str) -> None:
    """The output is, token by token, the weighted sum of its top-k experts (each on its own) plus shared."""
    built, (x,), found = exercise(component, case, device)
    assert_close(found["output"], naive_mixture(built.module, x), "output against the naive weighted sum",
                 atol=1e-5, rtol=1e-5)


def check_mixture_routing(component: Component, case: Case, device: str) -> None:
    """``routing`` picks the top-k scores (among the best groups, by the corrected scores); renormalised, they
    sum to 1 (times routed_scaling)."""
    built, (x,), _ = exercise(component, case, device)
    module = built.module
    with torch.no_grad():
        logits = module.router(x.reshape(-1, x.shape[-1]))  # (B, N, d) -> (T, d) -> (T, E)
        weights, index, _ = module.routing(logits)
        for t in range(logits.shape[0]):
            expected, chosen = naive_routing(module, logits[t])
            assert_close(weights[t], expected, f"token {t}'s routing weights", atol=1e-6, rtol=1e-5)
            if set(index[t].tolist()) != set(chosen.tolist()):
                raise AssertionError(f"token {t}: routed to experts {index[t].tolist()}, the top-k are "
                                     f"{chosen.tolist()}")
        if getattr(module, "renormalize", False):
            scale = float(getattr(module, "routed_scaling", 1.0))
            assert_close(weights.sum(-1), torch.full_like(weights[:, 0], scale), "renormalised weights' sums "
                         f"(times routed_scaling {scale:g})", atol=1e-5, rtol=1e-5)


def single_expert(case: Case) -> Case:
    """The case with one expert (and top_k 1, where the config has a top_k); a config that refuses one expert
    (its experts in groups) is no example."""
    changes = {"n_experts": 1, **({"top_k": 1} if hasattr(case.config, "top_k") else {})}
    try:
        config = attrs.evolve(case.config, **changes)
    except (ValueError, TypeError) as refused:  # FieldError is a ValueError
        assume(False, f"the config refuses a single expert: {refused}")
    return attrs.evolve(case, config=config)


def check_mixture_single_expert(component: Component, case: Case, device: str) -> None:
    """With one expert (and top_k 1), the mixture is that expert on its own times its routing weight (1 for a
    softmax or renormalised one, before routed_scaling), plus the shared part."""
    built, (x,), found = exercise(component, single_expert(case), device)
    module = built.module
    with torch.no_grad():
        logits = module.router(x.reshape(-1, x.shape[-1]))  # (T, 1)
        weight = torch.stack([naive_routing(module, row)[0] for row in logits]).view(*x.shape[:-1], 1)  # (B, N, 1)
        expected = weight * dense_expert(module, 0)(x) + shared_output(module, x)
    assert_close(found["output"], expected, "one expert against that expert alone", atol=1e-5, rtol=1e-5)


def permute_experts(module: nn.Module, perm: torch.Tensor) -> None:
    """Expert e becomes expert perm[e], the router's rows with them: the ModuleList's order, or the stacked
    tensors' first axis."""
    with torch.no_grad():
        module.router.weight.copy_(module.router.weight[perm])
        if getattr(module.router, "bias", None) is not None:
            module.router.bias.copy_(module.router.bias[perm])
        if hasattr(module, "experts"):
            module.experts = nn.ModuleList([module.experts[int(e)] for e in perm])
            return
        for name in (*EXPERT_TENSORS, "correction"):
            tensor = getattr(module, name, None)
            if tensor is not None:
                tensor.copy_(tensor[perm])


def check_mixture_permutation(component: Component, case: Case, device: str) -> None:
    """Permuting the experts together with the router's rows (and correction) changes nothing: any permutation
    without groups; with n_group groups, the groups' order and the experts' order within each group."""
    built, (x,), found = exercise(component, case, device)
    permuted = copy.deepcopy(built.module)
    perm = group_permutation(permuted.router.weight.shape[0], int(getattr(permuted, "n_group", 1)), case).to(device)
    permute_experts(permuted, perm)
    with torch.no_grad():
        output = permuted(x)
    assert_close(output, found["output"], f"output with the experts permuted by {perm.tolist()}", atol=1e-5, rtol=1e-5)


def group_permutation(n_experts: int, n_group: int, case: Case) -> torch.Tensor:
    """A random permutation of n_experts that keeps each group of n_experts / n_group together: groups
    shuffled as blocks, experts shuffled within each."""
    size, draw = n_experts // n_group, generator(case, 7)
    groups = torch.randperm(n_group, generator=draw)
    return torch.cat([g * size + torch.randperm(size, generator=draw) for g in groups.tolist()])  # (E,)


def check_aux_loss(component: Component, case: Case, device: str) -> None:
    """In training mode forward leaves ``aux_loss``, a finite scalar whose gradient reaches the router's
    weight; in eval mode it is None. Every token is the same one, so the routing is as unbalanced as it gets
    (a perfectly balanced routing is where a balancing loss is flat)."""
    module = build_isolated(component, case, device=device).module
    n_experts = module.router.weight.shape[0]
    assume(top_k(module) < n_experts, "every token goes to every expert: a balancing loss is constant")
    token = normal(case, 1, 1, case.model.d_model, device=device)
    x = token.expand(case.batch, case.tokens, -1).contiguous()  # (1, 1, d) -> (B, N, d), one token repeated
    module.train()
    module(x)
    loss = getattr(module, "aux_loss", None)
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        raise AssertionError(f"after a training-mode forward aux_loss is {_described(loss)}, not a scalar tensor")
    if not bool(torch.isfinite(loss)):
        raise AssertionError(f"aux_loss is {loss.item()}, not finite")
    if not loss.requires_grad:
        raise AssertionError("aux_loss carries no gradient (computed from detached values or from indices alone)")
    module.router.weight.grad = None
    loss.backward()
    grad = module.router.weight.grad
    if grad is None or not bool(grad.abs().sum() > 0):
        raise AssertionError("aux_loss.backward() leaves router.weight.grad "
                             f"{'None' if grad is None else 'zero'}: no gradient reaches the router")
    module.eval()
    with torch.no_grad():
        module(x)
    if getattr(module, "aux_loss", None) is not None:
        raise AssertionError(f"after an eval-mode forward aux_loss is {_described(module.aux_loss)}, not None")


def _described(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return repr(value)


FFN = (
    Property(name="contract", kind="ffn", check=check_contract, summary="(B, N, d) -> (B, N, d)"),
    Property(name="position_wise", kind="ffn", promise="position_wise", check=check_position_wise,
             weights="trained", dtypes=LEAK_DTYPES,
             summary="each token's output depends on that token alone"),
    Property(name="mixture_sum", kind="ffn", promise="mixture", check=check_mixture_sum,
             summary="output == the routing-weighted sum of the chosen experts, computed naively"),
    Property(name="mixture_routing", kind="ffn", promise="mixture", check=check_mixture_routing,
             summary="the top-k softmax weights; renormalised, they sum to 1"),
    Property(name="mixture_single_expert", kind="ffn", promise="mixture", check=check_mixture_single_expert,
             summary="one expert, top_k 1 == that expert alone"),
    Property(name="mixture_permutation", kind="ffn", promise="mixture", check=check_mixture_permutation,
             summary="permuting the experts with the router's rows changes nothing"),
    Property(name="aux_loss", kind="ffn", promise="aux_loss", check=check_aux_loss, share=0.4,
             summary="training: a finite scalar aux_loss with a gradient to the router; eval: None"),
)
