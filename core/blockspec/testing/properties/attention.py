"""Attention: (B, N, d) -> (B, N, d); causal ones never look ahead."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

from blockspec.modules.kv_cache import CacheLayout, LayerCache
from blockspec.modules.positional import PositionalEncoding
from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.errors import NotApplicable
from blockspec.testing.harness import assume, exercise, normal
from blockspec.testing.properties.base import (
    LEAK_DTYPES, Property, assert_close, assert_like, assert_shape, assert_unchanged, promised_option, sequence_cases,
)
from blockspec.testing.properties.cache import ReferenceEncoder, cache_tensors


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


def _weights(component: Component, case: Case, device: str):
    """(module, q, k, weights (B, h, N, N) in float64) from project() and weights()."""
    built, (x,), _ = exercise(component, case, device)
    module = built.module
    if not (hasattr(module, "project") and hasattr(module, "weights")):
        raise NotApplicable("the module exposes no project()/weights() to read attention weights from")
    with torch.no_grad():
        q, k, _ = module.project(x, PositionalEncoding(), case.start)
        return module, q, k, module.weights(q, k).double()


def check_weights(component: Component, case: Case, device: str) -> None:
    """Every head's weights: nothing above the diagonal; rows sum to 1 with row 0 [1, 0, ..., 0] (with sinks
    they sum to below 1: the ``sinks`` property checks them)."""
    module, _, _, weights = _weights(component, case, device)
    above = weights.triu(diagonal=1)
    assert_close(above, torch.zeros_like(above), "attention weights above the diagonal", atol=0, rtol=0)
    if _sinks(component, module) is not None:
        return
    first = torch.zeros_like(weights[..., 0, :])
    first[..., 0] = 1.0
    assert_close(weights[..., 0, :], first, "first row of the attention weights", atol=1e-6, rtol=0)
    assert_close(weights.sum(-1), torch.ones_like(weights[..., 0]), "row sums", atol=1e-5, rtol=0)


def check_sinks(component: Component, case: Case, device: str) -> None:
    """Each row of weights() is softmax([scores() + causal (windowed) mask, the head's sink]) without the
    sink's column: rows sum to below 1."""
    module, q, k, weights = _weights(component, case, device)
    window = _options(component, case, module)[1]
    if not (hasattr(module, "scores") and hasattr(module, "sinks")):
        raise NotApplicable("an attention with sinks needs scores() and sinks to check its weights against")
    assume(module.sinks is not None, "the config turns the sinks off")
    with torch.no_grad():
        scores = module.scores(q, k).double()  # (B, h, N, N)
    n = scores.shape[-1]
    expected = softmax_with_sinks(scores + reference_mask(n, n, window, scores.device), module.sinks)
    assert_close(weights, expected, "attention weights against softmax(masked scores joined by each head's sink)",
                 atol=1e-6, rtol=1e-5)


def check_sink_option(component: Component, case: Case, device: str) -> None:
    """With the config's sinks true the module's sinks is a trainable (n_heads,) parameter, with false None."""
    wanted = bool(promised_option(component, case, "sink_option"))
    module = exercise(component, case, device)[0].module
    sinks = getattr(module, "sinks", None)
    if not wanted:
        if sinks is not None:
            raise AssertionError(f"sinks = false, but the module's sinks is {type(sinks).__name__}, not None")
        return
    if not isinstance(sinks, torch.nn.Parameter) or tuple(sinks.shape) != (case.model.n_heads,):
        found = "None" if sinks is None else f"{type(sinks).__name__} of shape {tuple(sinks.shape)}"
        raise AssertionError(f"sinks = true: expected an (n_heads,) = ({case.model.n_heads},) parameter, found {found}")


def _sinks(component: Component, module) -> torch.Tensor | None:
    """The module's sink logits where it promises sinks and has them; None otherwise."""
    return getattr(module, "sinks", None) if "sinks" in component.promises else None


def reference_mask(n_q: int, n_k: int, window: int | None, device: torch.device) -> torch.Tensor:
    """(n_q, n_k) additive float64 mask, the queries being the last n_q of n_k positions: query i sees key j
    when j <= i, and, with a window w, j > i - w."""
    i = torch.arange(n_k - n_q, n_k, device=device)[:, None]
    j = torch.arange(n_k, device=device)[None, :]
    allowed = (j <= i) & (j > i - window) if window is not None else j <= i
    return torch.zeros(n_q, n_k, dtype=torch.float64, device=device).masked_fill(~allowed, float("-inf"))


def softmax_with_sinks(scores: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """Masked scores (B, h, N_q, N_k) -> weights: each head's sink logit joins every row's softmax and its
    column is dropped (it takes no value), so rows sum to below 1; without sinks, the plain softmax."""
    if sinks is None:
        return scores.softmax(dim=-1)
    column = sinks.double().view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)  # (h,) -> (B, h, N_q, 1)
    return torch.cat([scores, column], dim=-1).softmax(dim=-1)[..., :-1]  # (B, h, N_q, N_k + 1) -> (.., N_k)


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
    cache = LayerCache(*cache_tensors(module, CacheLayout(kv, hs, hs), case.batch, case.tokens, x))
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
    """With qk_norm: every head's q and k (per head, or all heads joined), divided by the learned scale, have
    the RMS an RMSNorm gives its input u: rms(u)/√(rms(u)² + eps), which is 1 up to eps/(2·rms(u)²)."""
    mode = _option(component, case, "qk_norm", "none")
    built, (x,), _ = exercise(component, case, device)
    module = built.module
    if not (hasattr(module, "project") and hasattr(module, "q_norm")):
        raise NotApplicable("the module exposes no project() and q_norm to check")
    with torch.no_grad(), _norm_inputs(module) as seen:
        q, k, _ = module.project(x, PositionalEncoding(), case.start)  # (B, h, N, hs), (B, kv, N, hs)
    for name, t, norm in (("q", q, module.q_norm), ("k", k, module.k_norm)):
        t = t.double()
        if mode == "all":
            t = t.transpose(1, 2).flatten(2)  # (B, h, N, hs) -> (B, N, heads·hs)
        rms = (t / _learned_scale(norm)).pow(2).mean(-1).sqrt()
        expected = _normalised_rms(seen.get(name), norm, rms.shape, t.dtype)
        assert_close(rms, expected, f"RMS of each {'token' if mode == 'all' else 'head'}'s {name} before the learned "
                     "scale, against rms(u)/√(rms(u)² + eps) of the norm's input u", atol=1e-4, rtol=0)


def check_qk_norm_offset(component: Component, case: Case, device: str) -> None:
    """With qk_norm_offset: q_norm and k_norm store w = 0 when freshly built and scale by 1 + w; without it,
    they scale by w. Each norm is called on its own input with its weight moved to noise (float64)."""
    _option(component, case, "qk_norm", "none")
    offset = bool(promised_option(component, case, "qk_norm_offset"))
    built, _, _ = exercise(component, case, device)
    for name in ("q_norm", "k_norm"):
        norm = getattr(built.module, name)
        if offset and not bool((norm.weight == 0).all()):
            raise AssertionError(f"qk_norm_offset = true, but the fresh {name}.weight is not 0 (the stored w of 1 + w)")
        with torch.no_grad():
            norm.weight.copy_(normal(case, *norm.weight.shape, offset=13, device=device))
            u = normal(case, case.batch, case.tokens, norm.weight.shape[0], offset=17, device=device)
            eps = getattr(norm, "eps", None)
            expected = F.rms_norm(u, norm.weight.shape, eps=torch.finfo(u.dtype).eps if eps is None else eps)
            expected = expected * (1 + norm.weight if offset else norm.weight)
            assert_close(norm(u), expected, f"{name}(u) against rms_norm(u)·({'1 + w' if offset else 'w'}) "
                         f"with qk_norm_offset = {str(offset).lower()}", atol=1e-10, rtol=1e-10)


def _learned_scale(norm: torch.nn.Module) -> torch.Tensor:
    """What the norm multiplies by: its weight, or 1 + weight for a norm whose class sets ``offset`` (Gemma's)."""
    return norm.weight.double() + (1.0 if getattr(norm, "offset", False) else 0.0)


@contextmanager
def _norm_inputs(module) -> Iterator[dict[str, torch.Tensor]]:
    """The inputs q_norm and k_norm receive while the block runs, by "q" and "k"."""
    seen: dict[str, torch.Tensor] = {}
    hooks = [getattr(module, f"{name}_norm").register_forward_pre_hook(
        lambda _m, args, name=name: seen.__setitem__(name, args[0])) for name in "qk"]
    try:
        yield seen
    finally:
        for hook in hooks:
            hook.remove()


def _normalised_rms(given: torch.Tensor | None, norm, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """What RMSNorm's output RMS is for each row of its input: rms/√(rms² + eps) (1 where the norm was never
    called as a module: then only rows far above eps can be checked, and 1 is what they give)."""
    if given is None or given.shape[:-1] != shape:
        return torch.ones(shape, dtype=dtype, device=given.device if given is not None else None)
    eps = getattr(norm, "eps", None)
    eps = torch.finfo(given.dtype).eps if eps is None else eps
    ms = given.double().pow(2).mean(-1)
    return (ms / (ms + eps)).sqrt()


# ---- softmax_heads: forward, cached and uncached, against the attention written out from project()'s q, k, v ----

def _options(component: Component, case: Case, module) -> tuple[Any, Any, torch.Tensor | None]:
    """The promised options the reference computes with: (softcap, sliding window, sinks), None where off."""
    cap = promised_option(component, case, "logit_softcap") if "logit_softcap" in component.promises else None
    window = promised_option(component, case, "sliding_window") if "sliding_window" in component.promises else None
    return cap, window, _sinks(component, module)


def reference_heads(module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, options) -> torch.Tensor:
    """softmax(cap(q·kᵀ·scale) + mask, with sinks)·v per head, in float64: q (B, h, N_q, hs) the last N_q of
    the N_k positions of k, v (B, kv, N_k, hs), each kv head serving h / kv query heads -> (B, h, N_q, hs)."""
    cap, window, sinks = options
    group = q.shape[1] // k.shape[1]
    k, v = (t.double().repeat_interleave(group, dim=1) for t in (k, v))  # (B, kv, N_k, hs) -> (B, h, N_k, hs)
    scale = float(getattr(module, "scale", q.shape[-1] ** -0.5))
    scores = q.double() @ k.transpose(-2, -1) * scale  # (B, h, N_q, N_k)
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    scores = scores + reference_mask(q.shape[-2], k.shape[-2], window, q.device)
    return softmax_with_sinks(scores, sinks) @ v


def reference_output(module, heads: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The module's output projection of the heads (B, h, N, hs), joined: (B, N, h·hs) -> (B, N, d)."""
    batch, _, n_tokens, _ = heads.shape
    joined = heads.transpose(1, 2).reshape(batch, n_tokens, -1)  # (B, h, N, hs) -> (B, N, h·hs)
    with torch.no_grad():
        return module.proj(joined.to(like.dtype))


def check_softmax_heads(component: Component, case: Case, device: str) -> None:
    """forward, in one call and decoded through a LayerCache (a prefix, then two tokens a call), equals the
    output projection of softmax(capped scores + causal, windowed mask, with sinks)·v over project()'s q, k, v."""
    built, (x,), _ = exercise(component, case, device)
    module = built.module
    if not (hasattr(module, "project") and hasattr(module, "proj")):
        raise NotApplicable("the module exposes no project() and proj to write its attention out from")
    options = _options(component, case, module)
    x = x * (case.factor if options[0] is not None else 1.0)  # a cap only bends scores of its own size
    encoder = ReferenceEncoder(case.model.n_heads, rotates=True, biases=False, dtype=x.dtype).to(device)
    with torch.no_grad():
        q, k, v = module.project(x, encoder, 0)
        whole = module(x, encoder, 0)
        cached = _decoded(module, x, encoder, case)
    expected = reference_output(module, reference_heads(module, q, k, v, options), x)
    tol = _tolerance(case, expected)
    what = _described_options(options)
    assert_close(whole, expected, f"forward against the attention written out ({what})", **tol)
    for first, end, part in cached:
        assert_close(part, expected[:, first:end], f"forward through a LayerCache at positions {first}..{end - 1} "
                     f"against the attention written out ({what})", **tol)


def _decoded(module, x: torch.Tensor, encoder, case: Case) -> list[tuple[int, int, torch.Tensor]]:
    """x (B, N, d) through a fresh LayerCache: positions 0..cut in one call, then two at a time."""
    hs, kv = getattr(module, "head_dim", case.model.head_dim), getattr(module, "n_kv_heads", case.model.kv_heads)
    # one slot spare: the module must use what update() returns
    cache = LayerCache(*cache_tensors(module, CacheLayout(kv, hs, hs), case.batch, case.tokens + 1, x))
    bounds = [0, *range(case.cut + 1, case.tokens, 2), case.tokens]
    calls = [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
    return [(a, b, module(x[:, a:b], encoder, a, cache)) for a, b in calls]


def _tolerance(case: Case, expected: torch.Tensor) -> dict[str, float]:
    """Relative to the outputs' size: the kernels (SDPA, an explicit softmax) round apart."""
    peak = expected.double().abs().max().item() if expected.numel() else 0.0
    tol = 1e-10 if case.dtype == "float64" else 1e-5
    return dict(atol=tol * max(peak, 1e-30), rtol=10 * tol)


def _described_options(options) -> str:
    cap, window, sinks = options
    parts = [f"logit_softcap {cap:g}" if cap is not None else "no softcap",
             f"sliding_window {window}" if window is not None else "no window"]
    return ", ".join(parts + (["sinks"] if sinks is not None else []))


ATTENTION = (
    Property(name="contract", kind="attention", check=check_contract, summary="(B, N, d) -> (B, N, d)"),
    Property(name="causal", cases=sequence_cases, kind="attention", promise="causal", check=check_causal,
             weights="trained", dtypes=LEAK_DTYPES,
             summary="outputs up to i ignore tokens after i"),
    Property(name="weights", kind="attention", promise="causal", check=check_weights,
             summary="no weight above the diagonal; rows sum to 1 (with sinks: the softmax joined by each head's sink)"),
    Property(name="sinks", kind="attention", promise="sinks", check=check_sinks,
             summary="weights == softmax(masked scores joined by each head's sink logit), sink column dropped"),
    Property(name="sink_option", kind="attention", promise="sink_option", check=check_sink_option,
             summary="config sinks true: an (n_heads,) parameter of sink logits; false: none"),
    Property(name="sliding_window", cases=sequence_cases, kind="attention", promise="sliding_window",
             check=check_sliding_window,
             summary="with sliding_window w: output at i ignores tokens before i - w + 1, cached or not"),
    Property(name="logit_softcap", kind="attention", promise="logit_softcap", check=check_logit_softcap,
             summary="with logit_softcap c: no score exceeds c"),
    Property(name="qk_norm", kind="attention", promise="qk_norm", check=check_qk_norm,
             summary="with qk_norm: q and k have unit RMS before the learned scale"),
    Property(name="qk_norm_offset", kind="attention", promise="qk_norm_offset", check=check_qk_norm_offset,
             weights="fresh", dtypes=LEAK_DTYPES,
             summary="with qk_norm_offset: q/k norms store w = 0 and scale by 1 + w"),
    Property(name="softmax_heads", cases=sequence_cases, kind="attention", promise="softmax_heads",
             check=check_softmax_heads, share=0.6,
             summary="forward, cached and uncached == proj(softmax(capped, masked scores, sinks)·v) from project()"),
)
