"""RoPE scalings: the angles a rotary encoder turns each feature pair by, against each scaling's formula.

The formulas are written here a second time, apart from any component: one frequency at a time in Python
floats, from their definitions (transformers' modeling_rope_utils, Llama 3.1's reference code, the YaRN
and LongRoPE papers). What the encoder does is read back through ``rotate`` alone, so a component is checked by what it
computes, not by what it says it computes.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import torch

from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.errors import NotApplicable, Refused
from blockspec.testing.harness import assume, build_isolated
from blockspec.testing.properties.base import Property, assert_close


def expected_frequency(i: int, dim: int, config: Any, context_length: int, end: int) -> float:
    """θ_i of feature pair i for a call whose last position is end - 1 (dynamic NTK and longrope care)."""
    kind, base = config.scaling, config.base
    if kind == "longrope":  # Phi-3.5: one divisor per pair, the long list once a call ends past the original length
        factors = config.long_factor if end > config.original_context_length else config.short_factor
        return base ** (-2 * i / dim) / factors[i]
    if kind == "dynamic" and end > context_length and dim > 2:  # dim 2: the only θ is base^0 = 1 anyway
        base *= (config.factor * end / context_length - config.factor + 1) ** (dim / (dim - 2))
    theta = base ** (-2 * i / dim)
    if kind == "linear":
        return theta / config.factor
    if kind == "llama3":
        return _llama3(theta, config)
    if kind == "yarn":
        return _yarn(theta, i, dim, config)
    return theta


def _llama3(theta: float, config: Any) -> float:
    """Short waves kept, long ones slowed by factor, linear in 1/wavelength between the two bounds."""
    length, factor = config.original_context_length, config.factor
    low = 1.0 if config.low_freq_factor is None else config.low_freq_factor
    high = 4.0 if config.high_freq_factor is None else config.high_freq_factor
    wavelength = 2 * math.pi / theta
    if wavelength < length / high:
        return theta
    if wavelength > length / low:
        return theta / factor
    smooth = (length / wavelength - low) / (high - low)
    return (1 - smooth) * theta / factor + smooth * theta


def _yarn(theta: float, i: int, dim: int, config: Any) -> float:
    """Pair i blends θ (turning often over the original context) into θ/factor (turning rarely)."""
    fast = 32.0 if config.beta_fast is None else config.beta_fast
    slow = 1.0 if config.beta_slow is None else config.beta_slow

    def pair_turning(turns: float) -> float:  # the pair index that turns `turns` times over the context
        return dim * math.log(config.original_context_length / (turns * 2 * math.pi)) / (2 * math.log(config.base))

    low, high = pair_turning(fast), pair_turning(slow)
    if config.truncate is None or config.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = min(max((i - low) / (high - low), 0.0), 1.0)
    return theta / config.factor * ramp + theta * (1 - ramp)


def expected_magnitude(config: Any, context_length: int) -> float:
    """What cos and sin are multiplied by: yarn's attention factor (default 0.1·ln(factor) + 1), longrope's
    (default sqrt(1 + ln s / ln L0), s = context_length / L0, when s > 1), else 1."""
    if config.scaling not in ("yarn", "longrope"):
        return 1.0
    if config.attention_factor is not None:
        return config.attention_factor
    if config.scaling == "longrope":
        original = config.original_context_length
        stretch = context_length / original
        return math.sqrt(1 + math.log(stretch) / math.log(original)) if stretch > 1 else 1.0
    return 0.1 * math.log(config.factor) + 1 if config.factor > 1 else 1.0


def measured(module: torch.nn.Module, layout: str, dim: int, head_dim: int, end: int,
             device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(θ, magnitude), each (dim/2,), read from ``rotate``: a unit vector on each pair's first feature, at
    positions end-2 and end-1, comes back as m·(cos pθ, sin pθ) on the pair; θ is the turn between the two."""
    pairs = torch.arange(dim // 2, device=device)
    first, second = (pairs, pairs + dim // 2) if layout == "half" else (2 * pairs, 2 * pairs + 1)
    unit = torch.zeros(1, dim // 2, 2, head_dim, dtype=torch.float64, device=device)  # (1, pairs, 2, hs)
    unit[0, pairs, :, first] = 1.0
    with torch.no_grad():
        turned, _ = module.rotate(unit, unit, end - 2)
    turned = turned[0].double()  # (pairs, 2, hs)
    z = torch.complex(turned[pairs, :, first], turned[pairs, :, second])  # (pairs, 2): m·e^(i·p·θ)
    return torch.angle(z[:, 1] * z[:, 0].conj()), z[:, 1].abs()


KNOWN_SCALINGS = ("none", "linear", "dynamic", "llama3", "yarn", "longrope")  # what expected_frequency computes


def check_rope_frequencies(component: Component, case: Case, device: str) -> None:
    """Each pair turns by its scaling's θ_i per position (for dynamic NTK and longrope: of a call ending where
    this one does), and cos and sin carry the attention factor (yarn, longrope). Where a scaling switches is
    where its bugs live, so each example is checked at the case's end and both sides of its switch
    (``call_ends``), and in the variants a draw seldom combines (``scaling_variants``). A scaling the kit does
    not know is no example: a component with its own declares its frequencies (``declared_frequencies``)."""
    assume(case.config.scaling in KNOWN_SCALINGS, f"the kit knows no formula for the scaling {case.config.scaling!r}")
    for index, variant in enumerate(scaling_variants(case)):
        try:
            module = build_isolated(component, variant, device=device).module
        except Refused:
            if index == 0:
                raise
            continue  # a variant the build declines is no example; the drawn case was one
        for end in call_ends(variant):
            _check_turns(module, variant, end, device)


def scaling_variants(case: Case) -> list[Case]:
    """The case as drawn; with its attention factor back at the default (derived from the sizes); each of
    those at a context of 4·original_context_length too, past the original length as long-context models are."""
    variants = [case]
    if getattr(case.config, "attention_factor", None) is not None:
        variants.append(attrs.evolve(case, config=attrs.evolve(case.config, attention_factor=None)))
    original = getattr(case.config, "original_context_length", None)
    if original and case.model.context_length != 4 * original:
        longer = attrs.evolve(case.model, context_length=4 * original)
        variants += [attrs.evolve(v, model=longer) for v in variants]
    return variants


def call_ends(case: Case) -> list[int]:
    """Where the calls checked end: the case's own, and each side of where its scaling switches frequencies
    (longrope: at its original length; dynamic NTK: at the context length)."""
    switch = {"longrope": getattr(case.config, "original_context_length", None),
              "dynamic": case.model.context_length}.get(case.config.scaling)
    ends = {case.start + case.tokens + 1} | ({max(switch, 2), switch + 1} if switch else set())
    return sorted(ends)


def _check_turns(module: torch.nn.Module, case: Case, end: int, device: str) -> None:
    """θ per pair and the cos/sin magnitude of one call ending at ``end``, against the kit's formulas."""
    config, dim = case.config, getattr(module, "rotary_dim", case.model.head_dim)
    theta, magnitude = measured(module, config.layout, dim, case.model.head_dim, end, device)
    expected = torch.tensor([expected_frequency(i, dim, config, case.model.context_length, end)
                             for i in range(dim // 2)], dtype=torch.float64)
    where = f"scaling {config.scaling!r} at context_length {case.model.context_length}"
    assert_close(theta.cpu(), expected, f"{where}: θ per pair for a call ending at position {end - 1}",
                 atol=1e-6, rtol=1e-6)
    assert_close(magnitude.cpu(), torch.full_like(expected, expected_magnitude(config, case.model.context_length)),
                 f"{where}: cos/sin magnitude", atol=1e-6, rtol=1e-6)


def check_declared_frequencies(component: Component, case: Case, device: str) -> None:
    """Each pair turns by the θ_i the module's own ``frequencies(end)`` declares for a call ending where this
    one does, in its ``layout``, with cos and sin at magnitude 1."""
    module = build_isolated(component, case, device=device).module
    if not callable(getattr(module, "frequencies", None)):
        raise NotApplicable("the module has no frequencies(end) declaring the θ_i it turns by")
    dim = getattr(module, "rotary_dim", case.model.head_dim)
    end = case.start + case.tokens + 1
    layout = getattr(module, "layout", "half")
    theta, magnitude = measured(module, layout, dim, case.model.head_dim, end, device)
    with torch.no_grad():
        declared = torch.as_tensor(module.frequencies(end), dtype=torch.float64).cpu()  # (dim/2,)
    what = f"θ per pair, as rotate() turns it, against frequencies({end}) ({layout} layout)"
    assert_close(theta.cpu(), declared, what, atol=1e-6, rtol=1e-6)
    assert_close(magnitude.cpu(), torch.ones_like(declared), "cos/sin magnitude", atol=1e-6, rtol=1e-6)


ROPE = (
    # share 4: a rotation of two tokens costs microseconds, and six scalings times their options times the sizes
    # is a wide space (longrope, one draw in eleven, is seen about nine times at the default budget)
    Property(name="rope_frequencies", kind="positional", promise="rope_frequencies", check=check_rope_frequencies,
             share=4.0,
             summary="each pair turns by its RoPE scaling's θ_i (linear, dynamic, llama3, yarn, longrope), "
                     "cos/sin scaled"),
    Property(name="declared_frequencies", kind="positional", promise="declared_frequencies",
             check=check_declared_frequencies, share=0.4,
             summary="each pair turns by the θ_i the module's frequencies(end) declares, cos/sin at magnitude 1"),
)
