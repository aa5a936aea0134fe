"""FFNs: (B, N, d) -> (B, N, d), each token on its own."""

from __future__ import annotations

import copy

import attrs
import torch
from torch import nn

from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.harness import exercise, generator
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


# A mixture of experts ("mixture"): the module has ``router`` (d -> E logits), ``top_k``, ``renormalize``,
# ``act`` and expert weights in Hugging Face Mixtral's layout, ``up`` (E, k·d_ff, d), ``down`` (E, d, d_ff)
# and ``up_bias`` (E, k·d_ff) / ``down_bias`` (E, d) or None, and ``shared_output(x)``: what the
# always-applied (shared) experts add. Its config has ``n_experts`` and ``top_k``.
EXPERT_TENSORS = ("up", "down", "up_bias", "down_bias")


def dense_expert(module: nn.Module, e: int) -> nn.Module:
    """Expert ``e`` as the core's dense FFN, holding copies of its weights."""
    from blockspec.modules.feed_forward import FeedForward

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
    weights, index = torch.topk(probs, module.top_k)
    if module.renormalize:
        weights = weights / weights.sum()
    return weights.to(logits.dtype), index


def naive_mixture(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Token by token: the routing weights times each chosen expert run as a dense FFN, plus the shared part."""
    flat = x.reshape(-1, x.shape[-1])
    rows = []
    with torch.no_grad():
        experts = {}
        for token in flat:
            weights, index = naive_routing(module, module.router(token))
            row = module.shared_output(token[None])[0]
            for w, e in zip(weights, index.tolist()):
                expert = experts.setdefault(e, dense_expert(module, e))
                row = row + w * expert(token[None])[0]
            rows.append(row)
    return torch.stack(rows).view(x.shape) if rows else torch.zeros_like(x)


def check_mixture_sum(component: Component, case: Case, device: str) -> None:
    """The output is, token by token, the weighted sum of its top-k experts (each the dense FFN) plus shared."""
    built, (x,), found = exercise(component, case, device)
    assert_close(found["output"], naive_mixture(built.module, x), "output against the naive weighted sum",
                 atol=1e-5, rtol=1e-5)


def check_mixture_routing(component: Component, case: Case, device: str) -> None:
    """The routing picks the top-k softmax probabilities; renormalised, they sum to 1."""
    built, (x,), _ = exercise(component, case, device)
    module = built.module
    with torch.no_grad():
        logits = module.router(x.reshape(-1, x.shape[-1]))  # (T, E)
        weights, index, _ = module.routing(logits)
        for t in range(logits.shape[0]):
            expected, chosen = naive_routing(module, logits[t])
            assert_close(weights[t], expected, f"token {t}'s routing weights", atol=1e-6, rtol=1e-5)
            if set(index[t].tolist()) != set(chosen.tolist()):
                raise AssertionError(f"token {t}: routed to experts {index[t].tolist()}, the top-k are {chosen.tolist()}")
        if module.renormalize:
            assert_close(weights.sum(-1), torch.ones_like(weights[:, 0]), "renormalised weights' sums",
                         atol=1e-5, rtol=1e-5)


def check_mixture_single_expert(component: Component, case: Case, device: str) -> None:
    """With one expert and top_k 1, the mixture is that expert's dense FFN (plus the shared part)."""
    single = attrs.evolve(case, config=attrs.evolve(case.config, n_experts=1, top_k=1))
    built, (x,), found = exercise(component, single, device)
    with torch.no_grad():
        expected = dense_expert(built.module, 0)(x) + built.module.shared_output(x)
    assert_close(found["output"], expected, "one expert against the dense FFN", atol=1e-5, rtol=1e-5)


def check_mixture_permutation(component: Component, case: Case, device: str) -> None:
    """Permuting the experts together with the router's rows changes nothing."""
    built, (x,), found = exercise(component, case, device)
    permuted = copy.deepcopy(built.module)
    n = permuted.router.weight.shape[0]
    perm = torch.randperm(n, generator=generator(case, 7)).to(device)
    with torch.no_grad():
        permuted.router.weight.copy_(permuted.router.weight[perm])
        for name in EXPERT_TENSORS:
            tensor = getattr(permuted, name, None)
            if tensor is not None:
                tensor.copy_(tensor[perm])
        output = permuted(x)
    assert_close(output, found["output"], f"output with the experts permuted by {perm.tolist()}", atol=1e-5, rtol=1e-5)


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
             summary="one expert, top_k 1 == the dense FFN with the same weights"),
    Property(name="mixture_permutation", kind="ffn", promise="mixture", check=check_mixture_permutation,
             summary="permuting the experts with the router's rows changes nothing"),
)
