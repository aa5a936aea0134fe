"""Attention: (B, N, d) -> (B, N, d); causal ones never look ahead."""

from __future__ import annotations

import torch

from blockspec.modules.kv_cache import LayerCache
from blockspec.modules.positional import PositionalEncoding
from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.errors import NotApplicable
from blockspec.testing.harness import assume, exercise, normal
from blockspec.testing.properties.base import (
    LEAK_DTYPES, Property, assert_close, assert_like, assert_shape, assert_unchanged, promised_option, sequence_cases,
)


def check_contract(component: Component, case: Case, device: str) -> None:
    """(B, N, d) in, (B, N, d) out, same dtype and device."""
    _, (x,), found = exercise(component, case, device)
    assert_shape(found["output"], tuple(x.shape), "attention output")
    assert_like(found["output"], x, "attention output")


def check_causal(component: Component, case: Case, device: str) -> None:
    """Changing tokens after position i leaves the outputs at 0..i unchanged (float64, trained weights)."""
    built, (x,), found = exercise(component, case, device)
    changed = x.clone()
    tail = normal(case, case.batch, case.tokens, case.model.d_model, offset=11, device=device)
    changed[:, case.cut + 1:] = tail[:, case.cut + 1:]  # (B, N, d): positions after cut replaced
    with torch.no_grad():
        out = built.module(changed, PositionalEncoding(), case.start)
    keep = case.cut + 1
    assert_unchanged(out[:, :keep], found["output"][:, :keep],
                     f"outputs at 0..{case.cut} after changing positions {keep}..")


def check_weights(component: Component, case: Case, device: str) -> None:
    """Every head's weights: row 0 is [1, 0, ..., 0], nothing above the diagonal, rows sum to 1."""
    built, (x,), _ = exercise(component, case, device)
    module = built.module
    if not (hasattr(module, "project") and hasattr(module, "weights")):
        raise NotApplicable("the module exposes no project()/weights() to read attention weights from")
    with torch.no_grad():
        q, k, _ = module.project(x, PositionalEncoding(), case.start)
        weights = module.weights(q, k).double()  # (B, h, N, N)
    first = torch.zeros_like(weights[..., 0, :])
    first[..., 0] = 1.0
    assert_close(weights[..., 0, :], first, "first row of the attention weights", atol=1e-6, rtol=0)
    above = weights.triu(diagonal=1)
    assert_close(above, torch.zeros_like(above), "attention weights above the diagonal", atol=0, rtol=0)
    assert_close(weights.sum(-1), torch.ones_like(weights[..., 0]), "row sums", atol=1e-5, rtol=0)


def _option(component: Component, case: Case, promise: str, off: object = None) -> object:
    """The promised option of the drawn case; the check is no example when the option is off."""
    value = promised_option(component, case, promise)
    assume(value != off, f"the config's {promise} is off")
    return value


def check_sliding_window(component: Component, case: Case, device: str) -> None:
    """With sliding_window w: the output at i ignores the tokens before i - w + 1, cached or not,
    and decoding through a KV cache gives the uncached outputs."""
    window = _option(component, case, "sliding_window")
    assume(case.cut + window < case.tokens, "no output lies a window past the changed tokens")
    built, (x, ), found = exercise(component, case, device)
    changed = x.clone()
    early = normal(case, case.batch, case.tokens, case.model.d_model, offset=13, device=device)
    changed[:, :case.cut + 1] = early[:, :case.cut + 1]  # (B, N, d): positions 0..cut replaced
    far = case.cut + window  # the first position whose window starts after cut
    with torch.no_grad():
        out = built.module(changed, PositionalEncoding(), case.start)
        cached = _cached(built.module, changed, case)
    assert_close(out[:, far:], found["output"][:, far:],
                 f"outputs at {far}.. (window {window}) after changing positions 0..{case.cut}", atol=1e-5, rtol=1e-5)
    assert_close(cached, out, "outputs decoded through a KV cache vs all at once", atol=1e-5, rtol=1e-4)


def _cached(module, x: torch.Tensor, case: Case) -> torch.Tensor:
    """x (B, N, d) at positions 0.. fed through a fresh LayerCache one token at a time (no encoder: the
    outputs do not depend on where the positions start)."""
    hs, kv = getattr(module, "head_dim", case.model.head_dim), getattr(module, "n_kv_heads", case.model.kv_heads)
    shape = (case.batch, kv, case.tokens, hs)
    cache = LayerCache(x.new_zeros(shape), x.new_zeros(shape))
    steps = [module(x[:, i:i + 1], PositionalEncoding(), i, cache) for i in range(case.tokens)]
    return torch.cat(steps, dim=1)  # (B, N, d)


def check_logit_softcap(component: Component, case: Case, device: str) -> None:
    """With logit_softcap c: no score the softmax sees exceeds c in magnitude (computed by ``scores``)."""
    cap = _option(component, case, "logit_softcap")
    built, (x,), _ = exercise(component, case, device)
    module = built.module
    if not (hasattr(module, "project") and hasattr(module, "scores")):
        raise NotApplicable("the module exposes no project()/scores() to read its scores from")
    with torch.no_grad():
        q, k, _ = module.project(case.factor * x, PositionalEncoding(), case.start)  # large inputs, large scores
        scores = module.scores(q, k).double()  # (B, h, N, N)
    worst = scores.abs().max().item()
    assert worst <= cap * (1 + 1e-6), f"a score of magnitude {worst:.6g} exceeds the cap {cap:g}"


def check_qk_norm(component: Component, case: Case, device: str) -> None:
    """With qk_norm: every head's q and k (per head, or all heads joined) have RMS 1 before the learned scale."""
    mode = _option(component, case, "qk_norm", "none")
    built, (x,), _ = exercise(component, case, device)
    module = built.module
    if not (hasattr(module, "project") and hasattr(module, "q_norm")):
        raise NotApplicable("the module exposes no project() and q_norm to check")
    with torch.no_grad():
        q, k, _ = module.project(x, PositionalEncoding(), case.start)  # (B, h, N, hs), (B, kv, N, hs)
    for name, t, norm in (("q", q, module.q_norm), ("k", k, module.k_norm)):
        t = t.double()
        if mode == "all":
            t = t.transpose(1, 2).flatten(2)  # (B, N, heads·hs)
        rms = (t / norm.weight.double()).pow(2).mean(-1).sqrt()
        assert_close(rms, torch.ones_like(rms), f"RMS of each {'token' if mode == 'all' else 'head'}'s {name} "
                     "before the learned scale", atol=1e-3, rtol=0)


ATTENTION = (
    Property(name="contract", kind="attention", check=check_contract, summary="(B, N, d) -> (B, N, d)"),
    Property(name="causal", cases=sequence_cases, kind="attention", promise="causal", check=check_causal,
             weights="trained", dtypes=LEAK_DTYPES,
             summary="outputs up to i ignore tokens after i"),
    Property(name="weights", kind="attention", promise="causal", check=check_weights,
             summary="row 0 is [1, 0, ...], no weight above the diagonal"),
    Property(name="sliding_window", cases=sequence_cases, kind="attention", promise="sliding_window",
             check=check_sliding_window,
             summary="with sliding_window w: output at i ignores tokens before i - w + 1, cached or not"),
    Property(name="logit_softcap", kind="attention", promise="logit_softcap", check=check_logit_softcap,
             summary="with logit_softcap c: no score exceeds c"),
    Property(name="qk_norm", kind="attention", promise="qk_norm", check=check_qk_norm,
             summary="with qk_norm: q and k have unit RMS before the learned scale"),
)
