"""blockspec-positional: learned, sinusoidal and rotary position encodings.

Configs live here and stay torch-free so discovery is cheap; modules load on build.
"""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen

from blockspec.plugin import BuildContext, Register, greater_than, hookimpl

BLOCKSPEC_API = 1


@frozen(kw_only=True)
class LearnedConfig:
    """A trainable table of context_length position vectors, added to the embeddings."""


@frozen(kw_only=True)
class SinusoidalConfig:
    """The 2017 fixed sinusoids, added to the embeddings; no parameters, any length."""

    base: float = field(default=10000.0, validator=greater_than(1.0))


@frozen(kw_only=True)
class RopeConfig:
    """Rotary encoding: q and k rotated by position inside attention; scores depend on offsets only."""

    base: float = field(default=10000.0, validator=greater_than(1.0))
    layout: Literal["half", "interleaved"] = "half"  # "half": Hugging Face Llama; "interleaved": the RoFormer paper


def build_learned(config: LearnedConfig, ctx: BuildContext):
    from .learned import LearnedPositions

    return LearnedPositions(ctx.model.context_length, ctx.model.d_model)


def build_sinusoidal(config: SinusoidalConfig, ctx: BuildContext):
    from .sinusoidal import SinusoidalPositions

    return SinusoidalPositions(ctx.model.context_length, ctx.model.d_model, base=config.base)


def build_rope(config: RopeConfig, ctx: BuildContext):
    from .rope import RotaryPositions

    if ctx.model.head_dim % 2:
        raise ValueError(f"rope needs an even head_dim (d_model / n_heads), found {ctx.model.head_dim}")
    return RotaryPositions(ctx.model.head_dim, ctx.model.context_length, base=config.base, layout=config.layout)


@hookimpl
def blockspec_register(register: Register) -> None:
    register("positional", "learned", LearnedConfig, build_learned, promises=("additive",))
    register("positional", "sinusoidal", SinusoidalConfig, build_sinusoidal,
             promises=("additive", "relative", "unbounded"))
    register("positional", "rope", RopeConfig, build_rope, promises=("rotary", "relative", "unbounded"))
