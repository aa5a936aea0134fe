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
# Its config has ``n_experts`` (and ``top_k`` when it routes to more than one).
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
    """One token's router logits (E,) -> its top-k weights and expert ids, by the definition."""
    probs = torch.softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
    weights, index = torch.topk(probs, top_k(module))
    if getattr(module, "renormalize", False):
        weights = weights / weights.sum()
    return weights.to(logits.dtype), index


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
    """``routing`` picks the top-k softmax probabilities; renormalised, they sum to 1."""
    built, (x,), _ = exercise(component, case, device)
    module = built.module
    with torch.no_grad():
        logits = module.router(x.reshape(-1, x.shape[-1]))  # (B, N, d) -> (T, d) -> (T, E)
        weights, index, _ = module.routing(logits)
        for t in range(logits.shape[0]):
            expected, chosen = naive_routing(module, logits[t])
            assert_close(weights[t], expected, f"token {t}'s routing weights", atol=1e-6, rtol=1e-5)
            if set(index[t].tolist()) != set(chosen.tolist()):
                raise AssertionError(f"token {t}: routed to experts {index[t].tolist()}, the top-k are {chosen.tolist()}")
        if getattr(module, "renormalize", False):
            assert_close(weights.sum(-1), torch.ones_like(weights[:, 0]), "renormalised weights' sums",
                         atol=1e-5, rtol=1e-5)


def single_expert(case: Case) -> Case:
    """The case with one expert (and top_k 1, where the config has a top_k)."""
    changes = {"n_experts": 1, **({"top_k": 1} if hasattr(case.config, "top_k") else {})}
    return attrs.evolve(case, config=attrs.evolve(case.config, **changes))


def check_mixture_single_expert(component: Component, case: Case, device: str) -> None:
    """With one expert (and top_k 1), the mixture is that expert on its own (plus the shared part)."""
    built, (x,), found = exercise(component, single_expert(case), device)
    with torch.no_grad():
        expected = dense_expert(built.module, 0)(x) + shared_output(built.module, x)
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
        for name in EXPERT_TENSORS:
            tensor = getattr(module, name, None)
            if tensor is not None:
                tensor.copy_(tensor[perm])


def check_mixture_permutation(component: Component, case: Case, device: str) -> None:
    """Permuting the experts together with the router's rows changes nothing."""
    built, (x,), found = exercise(component, case, device)
    permuted = copy.deepcopy(built.module)
    perm = torch.randperm(permuted.router.weight.shape[0], generator=generator(case, 7)).to(device)
    permute_experts(permuted, perm)
    with torch.no_grad():
        output = permuted(x)
    assert_close(output, found["output"], f"output with the experts permuted by {perm.tolist()}", atol=1e-5, rtol=1e-5)


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
