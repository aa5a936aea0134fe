"""Positional encoders: the hooks they say they use, relativity, rotations, the context limit."""

from __future__ import annotations

import attrs
import torch

from blockspec.errors import ContextLengthError
from blockspec.modules.attention import CausalSelfAttention
from blockspec.modules.positional import embed_at
from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.errors import NotApplicable
from blockspec.testing.harness import assume, build_isolated, clamp_start, exercise, normal
from blockspec.testing.properties.base import (Property, assert_close, assert_like, assert_shape, assert_unchanged,
                                              promised_option)

FLAGS = {"additive": "adds", "rotary": "rotates", "score_bias": "biases"}


def check_contract(component: Component, case: Case, device: str) -> None:
    """Flags match the promises; each hook keeps the shapes, dtype and device the model relies on."""
    built, (x, q, k), found = exercise(component, case, device)
    for promise, flag in FLAGS.items():
        declared, raised = promise in component.promises, bool(getattr(built.module, flag, False))
        if declared != raised:
            said = "promises" if declared else "does not promise"
            raise AssertionError(f"{said} {promise!r} but the module's {flag} flag is {raised}")
    if "embed" in found:
        assert_shape(found["embed"], tuple(x.shape), "embed(x)")
        assert_like(found["embed"], x, "embed(x)")
    if "rotate.q" in found:
        for name, before in (("rotate.q", q), ("rotate.k", k)):
            assert_shape(found[name], tuple(before.shape), name)
            assert_like(found[name], before, name)
    if found.get("score_bias") is not None:
        _check_bias_shape(found["score_bias"], case)


def _check_bias_shape(bias: torch.Tensor, case: Case) -> None:
    scores = (case.batch, case.model.n_heads, case.tokens, case.tokens)
    try:
        shape = torch.broadcast_shapes(tuple(bias.shape), scores)
    except RuntimeError:
        shape = None
    if shape != scores:
        raise AssertionError(f"score_bias shape {tuple(bias.shape)} does not broadcast to the scores {scores}")


def check_relative_additive(component: Component, case: Case, device: str) -> None:
    """PE(p + k) = PE(p) · M_k for one fixed matrix M_k: least squares over many p leaves ~no residual.

    The fit needs more positions than features (2·d + 8), so the context is stretched to hold them.
    """
    d, shift = case.model.d_model, 1 + case.cut + case.start % 5
    count = 2 * d + 8
    roomy = attrs.evolve(case.model, context_length=max(case.model.context_length, count + shift))
    built = build_isolated(component, attrs.evolve(case, model=roomy), device=device)
    limit = getattr(built.module, "max_positions", None)
    assume(limit is None or limit >= count + shift,  # a table that ignores context_length: no example
           f"max_positions={limit} is below the {count + shift} positions the fit needs")
    table = encodings(built.module, count + shift, d, device).double()  # (P + k, d)
    residual = fit_residual(table[:count], table[shift:shift + count])
    if residual > 1e-4:
        raise AssertionError(f"no fixed linear map takes PE(p) to PE(p+{shift}): least-squares relative "
                             f"residual {residual:.3g} over {count} positions (expected <= 1e-4; "
                             f"context_length stretched to {roomy.context_length})")


def encodings(module: torch.nn.Module, n_positions: int, d_model: int, device: str) -> torch.Tensor:
    """What an additive encoder adds at positions 0..n-1: embed() of zeros, (n, d)."""
    zeros = torch.zeros(1, n_positions, d_model, device=device, dtype=next(_floats(module), torch.float32))
    with torch.no_grad():
        return module.embed(zeros, 0)[0]


def _floats(module: torch.nn.Module):
    return (t.dtype for t in [*module.parameters(), *module.buffers()] if t.is_floating_point())


def fit_residual(before: torch.Tensor, after: torch.Tensor) -> float:
    """||before·M - after|| / ||after|| for the least-squares M (float64)."""
    solution = torch.linalg.lstsq(before, after, driver="gelsd").solution  # (d, d)
    scale = after.norm().clamp_min(1e-300)
    return ((before @ solution - after).norm() / scale).item()


def rotated_scores(module: torch.nn.Module, case: Case, start: int, device: str) -> torch.Tensor:
    """Scores <R_m q, R_n k> for one q and one k placed at every position start..start+T-1: (T, T)."""
    hs, length = case.model.head_dim, case.tokens + 1
    q = normal(case, 1, 1, 1, hs, offset=1, device=device).expand(1, 1, length, hs)  # (1, 1, T, hs)
    k = normal(case, 1, 1, 1, hs, offset=2, device=device).expand(1, 1, length, hs)  # (1, 1, T, hs)
    with torch.no_grad():
        rq, rk = module.rotate(q.contiguous(), k.contiguous(), start)
    return (rq @ rk.transpose(-2, -1))[0, 0].double()  # (T, T)


def check_relative_rotary(component: Component, case: Case, device: str) -> None:
    """<R_m q, R_n k> depends only on m - n: the same at any start, and constant along diagonals.

    An encoder whose frequencies follow the call's length (``length_dependent``: dynamic NTK RoPE) is
    relative within one call only: its diagonals are checked, not a moved start against start 0.
    """
    module = build_isolated(component, case, device=device).module
    start = clamp_start(module, attrs.evolve(case, tokens=case.tokens + 1))
    moved = rotated_scores(module, case, start, device)
    scale = _magnitude(module) ** 2  # scores grow by the square of a scaled rotation's factor (yarn)
    tolerance = dict(atol=1e-4 * case.model.head_dim * scale, rtol=1e-4)
    if not getattr(module, "length_dependent", False):
        origin = rotated_scores(module, case, 0, device)
        assert_close(moved, origin, f"scores with positions starting at {start} vs at 0", **tolerance)
    assert_close(moved[1:, 1:], moved[:-1, :-1], "score(m+1, n+1) vs score(m, n)", **tolerance)


def _magnitude(module: torch.nn.Module) -> float:
    """What rotation multiplies lengths by: the encoder's ``attention_factor`` (yarn RoPE), else 1."""
    return float(getattr(module, "attention_factor", 1.0))


def check_rotation_norms(component: Component, case: Case, device: str) -> None:
    """A rotation changes directions, never lengths: ||R q|| = ||q|| for every vector (times the encoder's
    ``attention_factor`` where it scales cos and sin: yarn RoPE)."""
    built, (_, q, k), found = exercise(component, case, device)
    scale, turned = _magnitude(built.module), getattr(built.module, "rotary_dim", case.model.head_dim)
    for name, before in (("rotate.q", q), ("rotate.k", k)):
        squares = before.double() ** 2  # (B, h, N, hs): only the rotated features scale
        expected = (squares[..., :turned].sum(-1) * scale ** 2 + squares[..., turned:].sum(-1)).sqrt()
        assert_close(found[name].norm(dim=-1), expected, f"{name} vector lengths", atol=1e-4, rtol=1e-4)


def check_partial_rotary(component: Component, case: Case, device: str) -> None:
    """With the promised fraction < 1: the features past the encoder's rotary_dim leave rotate() unchanged
    (``relative`` and ``rotation_norms`` cover the rotated part)."""
    assume(promised_option(component, case, "partial_rotary") < 1.0, "the config rotates every feature")
    built, (_, q, k), found = exercise(component, case, device)
    rotary_dim = getattr(built.module, "rotary_dim", None)
    if rotary_dim is None:
        raise NotApplicable("the module says no rotary_dim: which features rotate is unknown")
    for name, before in (("rotate.q", q), ("rotate.k", k)):
        assert_close(found[name][..., rotary_dim:], before[..., rotary_dim:],
                     f"{name} features {rotary_dim}.. (not rotated)", atol=0, rtol=0)


def check_relative_bias(component: Component, case: Case, device: str) -> None:
    """The score bias at (i, j) depends only on i - j (on the causal part j <= i), at any start."""
    module = build_isolated(component, case, device=device).module
    length = case.tokens + 1
    start = clamp_start(module, attrs.evolve(case, tokens=length))
    with torch.no_grad():
        moved, origin = module.score_bias(length, length, start), module.score_bias(length, length, 0)
    lower = torch.ones(length, length, dtype=torch.bool, device=moved.device).tril()
    same = torch.where(lower, moved.double(), 0.0), torch.where(lower, origin.double(), 0.0)
    assert_close(same[0], same[1], f"score_bias with positions starting at {start} vs at 0", atol=1e-5, rtol=1e-5)
    assert_close(same[0][..., 1:, 1:], same[0][..., :-1, :-1], "bias(i+1, j+1) vs bias(i, j)",
                 atol=1e-5, rtol=1e-5)


def check_context_limit(component: Component, case: Case, device: str) -> None:
    """Unbounded encoders work far past the context; bounded ones raise ContextLengthError there."""
    module = build_isolated(component, case, device=device).module
    limit = getattr(module, "max_positions", "missing")
    unbounded = "unbounded" in component.promises
    if unbounded and limit is not None:
        raise AssertionError(f"promises 'unbounded' but max_positions is {limit!r}, not None")
    if unbounded:
        far = attrs.evolve(case, start=10 * case.model.context_length + case.start)
        _, _, found = exercise(component, far, device)
        bad = [name for name, t in found.items() if t is not None and not bool(torch.isfinite(t).all())]
        if bad:
            raise AssertionError(f"not finite at positions from {far.start}: {', '.join(bad)}")
        return
    _check_bounded(module, limit)


def _check_bounded(module: torch.nn.Module, limit: object) -> None:
    if not isinstance(limit, int):
        raise AssertionError(f"does not promise 'unbounded', so max_positions must be an int, found {limit!r}")
    module.check_length(limit)
    try:
        module.check_length(limit + 1)
    except ContextLengthError:
        return
    raise AssertionError(f"position {limit} is past max_positions={limit} but no ContextLengthError was raised")


def check_relative(component: Component, case: Case, device: str) -> None:
    """Relative, as each hook the encoder uses understands it."""
    promises = component.promises
    checks = [(p, c) for p, c in (("additive", check_relative_additive), ("rotary", check_relative_rotary),
                                  ("score_bias", check_relative_bias)) if p in promises]
    if not checks:
        raise AssertionError("promises 'relative' but none of additive, rotary, score_bias")
    for _, check in checks:
        check(component, case, device)


def check_position_free(component: Component, case: Case, device: str) -> None:
    """The core's causal attention, through the encoder (embed too, if it adds), gives the last token the same
    output when the tokens before it come in reverse order (float64): no hook tells positions apart."""
    assume(case.tokens >= 3, "fewer than two tokens before the last to reorder")
    module = build_isolated(component, case, device=device).module.double()
    start = clamp_start(module, case)
    attention = _probe_attention(case, device)
    x = normal(case, case.batch, case.tokens, case.model.d_model, offset=19, device=device).double()
    reordered = torch.cat((x[:, :-1].flip(1), x[:, -1:]), dim=1)  # (B, N, d): tokens 0..N-2 reversed
    with torch.no_grad():
        outputs = [_attended(attention, module, inputs, start)[:, -1] for inputs in (x, reordered)]
    assert_unchanged(outputs[1], outputs[0], f"the last token's attention output (positions from {start}) "
                     "after reversing the tokens before it")


def _probe_attention(case: Case, device: str) -> CausalSelfAttention:
    """The core's causal attention at the case's sizes, seeded from the case, in float64."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seed)
        model = case.model
        attention = CausalSelfAttention(d_model=model.d_model, n_heads=model.n_heads, n_kv_heads=model.kv_heads,
                                        bias=False, dropout=0.0, head_dim=model.head_dim)
    return attention.to(device=device, dtype=torch.float64).eval()


def _attended(attention: CausalSelfAttention, encoder: torch.nn.Module, x: torch.Tensor, start: int) -> torch.Tensor:
    """x (B, N, d) with the encoder's additive signal, if any, then attention rotating or biasing by it."""
    if getattr(encoder, "adds", False):
        x = embed_at(encoder, x, start)
    return attention(x, encoder, start)


POSITIONAL = (
    Property(name="contract", kind="positional", check=check_contract,
             summary="flags match promises; embed/rotate/score_bias keep shapes, dtype, device"),
    Property(name="relative", kind="positional", promise="relative", check=check_relative,
             summary="PE(p+k) is a fixed linear map of PE(p); scores and biases depend on offsets only"),
    Property(name="rotation_norms", kind="positional", promise="norm_preserving", check=check_rotation_norms,
             summary="rotating q and k preserves their lengths (times attention_factor, if any)"),
    Property(name="partial_rotary", kind="positional", promise="partial_rotary", check=check_partial_rotary,
             summary="with fraction < 1: the features past rotary_dim pass unchanged"),
    Property(name="position_free", kind="positional", promise="position_free", check=check_position_free,
             summary="attention through it sees earlier tokens as a set: reordering them leaves the last output"),
    Property(name="context_limit", kind="positional", check=check_context_limit,
             summary="unbounded: works far past the context; otherwise ContextLengthError past max_positions"),
)
