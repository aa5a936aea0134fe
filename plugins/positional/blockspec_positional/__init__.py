"""blockspec-positional: learned, sinusoidal and rotary position encodings, and none (NoPE).

Configs live here and stay torch-free so discovery is cheap; modules load on build.
"""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen
from attrs.validators import optional

from blockspec.plugin import (OMIT_DEFAULT, BuildContext, FieldError, Register, at_least, greater_than, hookimpl,
                              in_range, positive)

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


ScalingKind = Literal["none", "linear", "dynamic", "llama3", "yarn"]

# scaling -> (the options it needs, the options it may take); every other option must stay unset
SCALING_OPTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "none": ((), ()),
    "linear": (("factor",), ()),
    "dynamic": (("factor",), ()),
    "llama3": (("factor", "original_context_length"), ("low_freq_factor", "high_freq_factor")),
    "yarn": (("factor", "original_context_length"), ("attention_factor", "beta_fast", "beta_slow", "truncate")),
}
OPTIONS = ("factor", "original_context_length", "low_freq_factor", "high_freq_factor", "attention_factor",
           "beta_fast", "beta_slow", "truncate")


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
    beta_slow 1.0, truncate true): NTK-by-parts, and cos and sin times attention_factor (scores times its square).
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

    def __attrs_post_init__(self) -> None:
        errors = scaling_errors(self)
        if errors:
            raise errors[0]


def scaling_errors(config: RopeConfig) -> list[FieldError]:
    """Each option the scaling needs but lacks, each one set that it does not take, at the option's own key."""
    needed, allowed = SCALING_OPTIONS.get(config.scaling, ((), ()))
    errors = [FieldError(name, f"missing: scaling = {config.scaling!r} needs it")
              for name in needed if getattr(config, name) is None]
    for name in OPTIONS:
        if getattr(config, name) is not None and name not in needed + allowed:
            takers = [s for s, (need, may) in SCALING_OPTIONS.items() if name in need + may]
            errors.append(FieldError(name, f"only for scaling = {' or '.join(map(repr, takers))}, "
                                           f"found scaling = {config.scaling!r}"))
    low, high = config.low_freq_factor or 1.0, config.high_freq_factor or 4.0
    if config.scaling == "llama3" and high <= low:
        errors.append(FieldError("high_freq_factor", f"expected a number > low_freq_factor = {low}, found {high}"))
    return errors


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
    options = {name: getattr(config, name) for name in OPTIONS if getattr(config, name) is not None}
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
