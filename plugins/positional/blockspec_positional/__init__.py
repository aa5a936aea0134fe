"""blockspec-positional: learned, sinusoidal and rotary position encodings, and none (NoPE).

Configs live here and stay torch-free so discovery is cheap; modules load on build.
"""

from __future__ import annotations

import math
from typing import Literal

from attrs import field, frozen
from attrs.validators import optional

from blockspec.plugin import (OMIT_DEFAULT, BuildContext, FieldError, ModelConfig, Register, at_least, greater_than,
                              hookimpl, in_range, positive, sized_by)

BLOCKSPEC_API = 1


@frozen(kw_only=True)
class LearnedConfig:
    """A trainable table of context_length position vectors, added to the embeddings."""


@frozen(kw_only=True)
class NoneConfig:
    """No positions at all (NoPE): for [[layers]] that skip RoPE, as SmolLM3's every fourth layer does."""


@frozen(kw_only=True)
class SinusoidalConfig:
    """The 2017 fixed sinusoids, added to the embeddings; no parameters, any length."""

    base: float = field(default=10000.0, validator=greater_than(1.0))


ScalingKind = Literal["none", "linear", "dynamic", "llama3", "yarn", "longrope"]

# scaling -> (the options it needs, the options it may take); every other option must stay unset
SCALING_OPTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "none": ((), ()),
    "linear": (("factor",), ()),
    "dynamic": (("factor",), ()),
    "llama3": (("factor", "original_context_length"), ("low_freq_factor", "high_freq_factor")),
    "yarn": (("factor", "original_context_length"), ("attention_factor", "beta_fast", "beta_slow", "truncate")),
    "longrope": (("short_factor", "long_factor", "original_context_length"), ("attention_factor",)),
}
OPTIONS = ("factor", "original_context_length", "low_freq_factor", "high_freq_factor", "attention_factor",
           "beta_fast", "beta_slow", "truncate", "short_factor", "long_factor")
FACTOR_LISTS = ("short_factor", "long_factor")  # longrope's per-pair divisors; () is unset


def rotary_width(head_dim: int, fraction: float) -> int:
    """How many features of each head rotate: fraction·head_dim rounded down to an even number, at least 2."""
    if fraction >= 1.0:
        return head_dim
    return max(2, 2 * int(fraction * head_dim / 2))


def rotary_pairs(config: RopeConfig, model: ModelConfig) -> int:
    """The rotated feature pairs of each head: how many entries longrope's factor lists hold."""
    return rotary_width(model.head_dim, config.fraction) // 2


PER_PAIR = {**OMIT_DEFAULT, **sized_by(rotary_pairs, "rotated feature pair")}  # checked by the assembler


def _optional(*validators):
    return field(default=None, validator=optional(list(validators)), metadata=OMIT_DEFAULT)


@frozen(kw_only=True)
class RopeConfig:
    """Rotary encoding: q and k rotated by position inside attention; scores depend on offsets only
    (with dynamic scaling: within one call).

    fraction: the share of each head's features that rotate, the first fraction·head_dim (rounded down to an
    even number, at least 2); the rest pass unchanged (GPT-NeoX/Pythia 0.25, Phi 0.4). 1.0: all of them.

    scaling stretches the frequencies for contexts longer than the model was trained on, as transformers'
    rope types do; each takes only its own options (unset ones take the default shown):
    "linear" (factor): every frequency / factor (position interpolation);
    "dynamic" (factor): NTK-aware; once a call reaches past [model] context_length L, the base grows to
    base·(factor·end/L - factor + 1)^(d/(d-2)), end = the call's last position + 1. Each call's frequencies
    follow its own end, so keys kept in a KV cache keep the older ones: cached and uncached decoding differ,
    in blockspec as in transformers;
    "llama3" (factor, original_context_length, low_freq_factor 1.0, high_freq_factor 4.0): Llama 3.1's
    wavelength bands: short waves kept, long ones / factor, a smooth ramp between;
    "yarn" (factor, original_context_length, attention_factor 0.1·ln(factor) + 1, beta_fast 32.0,
    beta_slow 1.0, truncate true): NTK-by-parts, and cos and sin times attention_factor (scores times its square);
    "longrope" (short_factor, long_factor, original_context_length L0 >= 2, attention_factor
    sqrt(1 + ln(s)/ln(L0)) with s = context_length/L0, 1 when s <= 1): Phi-3.5's per-pair θ_i / factor_i, the
    short factors for a call that ends at or before L0, the long ones past it (per call, as dynamic; generation
    recomputes its cache at L0, as transformers' Phi-3 does), cos and sin times attention_factor. Each list holds
    one positive number per rotated pair (rotated width / 2).
    """

    base: float = field(default=10000.0, validator=greater_than(1.0))
    layout: Literal["half", "interleaved"] = "half"  # "half": Hugging Face Llama; "interleaved": the RoFormer paper
    fraction: float = field(default=1.0, validator=[greater_than(0.0), in_range(0.0, 1.0, high_open=False)],
                            metadata=OMIT_DEFAULT)
    scaling: ScalingKind = field(default="none", metadata=OMIT_DEFAULT)
    factor: float | None = _optional(at_least(1.0))
    original_context_length: int | None = _optional(positive)
    low_freq_factor: float | None = _optional(greater_than(0.0))
    high_freq_factor: float | None = _optional(greater_than(0.0))
    attention_factor: float | None = _optional(greater_than(0.0))
    beta_fast: float | None = _optional(greater_than(0.0))
    beta_slow: float | None = _optional(greater_than(0.0))
    truncate: bool | None = _optional()
    short_factor: tuple[float, ...] = field(default=(), metadata=PER_PAIR)
    long_factor: tuple[float, ...] = field(default=(), metadata=PER_PAIR)

    def __attrs_post_init__(self) -> None:
        errors = scaling_errors(self)
        if errors:
            raise errors[0]


def scaling_errors(config: RopeConfig) -> list[FieldError]:
    """Each option the scaling needs but lacks, each one set that it does not take, at the option's own key."""
    needed, allowed = SCALING_OPTIONS.get(config.scaling, ((), ()))
    errors = [FieldError(name, f"missing: scaling = {config.scaling!r} needs it")
              for name in needed if not is_set(config, name)]
    for name in OPTIONS:
        if is_set(config, name) and name not in needed + allowed:
            takers = [s for s, (need, may) in SCALING_OPTIONS.items() if name in need + may]
            errors.append(FieldError(name, f"only for scaling = {' or '.join(map(repr, takers))}, "
                                           f"found scaling = {config.scaling!r}"))
    low, high = config.low_freq_factor or 1.0, config.high_freq_factor or 4.0
    if config.scaling == "llama3" and high <= low:
        errors.append(FieldError("high_freq_factor", f"expected a number > low_freq_factor = {low}, found {high}"))
    return errors + longrope_errors(config) if config.scaling == "longrope" else errors


def is_set(config: RopeConfig, name: str) -> bool:
    """Whether an option is given: not None, and for the factor lists not empty."""
    value = getattr(config, name)
    return value is not None and value != ()


def longrope_errors(config: RopeConfig) -> list[FieldError]:
    """Every factor positive and finite (each divides a frequency), L0 >= 2 (the attention factor divides by ln L0)."""
    errors = [FieldError(name, f"expected positive finite numbers, found {value!r} at index {i}")
              for name in FACTOR_LISTS for i, value in _first_bad(getattr(config, name))]
    length = config.original_context_length
    if length is not None and length < 2:
        errors.append(FieldError("original_context_length", "expected an integer >= 2 for scaling = 'longrope' "
                                 f"(its attention factor divides by ln of it), found {length}"))
    return errors


def _first_bad(factors: tuple[float, ...]) -> list[tuple[int, float]]:
    """The first entry that is not a positive finite number, with its index (none: [])."""
    return [(i, v) for i, v in enumerate(factors) if not (math.isfinite(v) and v > 0)][:1]


def build_learned(config: LearnedConfig, ctx: BuildContext):
    from .learned import LearnedPositions

    return LearnedPositions(ctx.model.context_length, ctx.model.d_model)


def build_none(config: NoneConfig, ctx: BuildContext):
    from .none import NoPositions

    return NoPositions()


def build_sinusoidal(config: SinusoidalConfig, ctx: BuildContext):
    from .sinusoidal import SinusoidalPositions

    return SinusoidalPositions(ctx.model.context_length, ctx.model.d_model, base=config.base)


def build_rope(config: RopeConfig, ctx: BuildContext):
    from .rope import RotaryPositions, Scaling

    if ctx.model.head_dim % 2:
        raise ValueError(f"rope needs an even head_dim (d_model / n_heads or [model] head_dim), found {ctx.model.head_dim}")
    pairs = rotary_pairs(config, ctx.model)  # the assembler refuses other lengths at their keys; built directly:
    if config.scaling == "longrope" and {len(config.short_factor), len(config.long_factor)} != {pairs}:
        raise ValueError(f"longrope needs one short and one long factor per rotated pair ({pairs}), found "
                         f"{len(config.short_factor)} and {len(config.long_factor)}")
    options = {name: getattr(config, name) for name in OPTIONS if is_set(config, name)}
    return RotaryPositions(ctx.model.head_dim, ctx.model.context_length, base=config.base, layout=config.layout,
                           fraction=config.fraction, scaling=Scaling(kind=config.scaling, **options))


@hookimpl
def blockspec_register(register: Register) -> None:
    register("positional", "learned", LearnedConfig, build_learned, promises=("additive", "compiles"))
    register("positional", "sinusoidal", SinusoidalConfig, build_sinusoidal,
             promises=("additive", "relative", "unbounded", "compiles"))
    register("positional", "none", NoneConfig, build_none, promises=("position_free", "unbounded", "compiles"))
    register("positional", "rope", RopeConfig, build_rope,
             promises=("rotary", "norm_preserving", "relative", "unbounded", "partial_rotary", "rope_frequencies",
                       "compiles"))
