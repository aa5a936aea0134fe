"""blockspec-positional: learned, sinusoidal and rotary position encodings.

Configs live here and stay torch-free so discovery is cheap; modules load on build.
"""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen

from blockspec.plugin import OMIT_DEFAULT, BuildContext, Register, greater_than, hookimpl, in_range

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
    """Rotary encoding: q and k rotated by position inside attention; scores depend on offsets only.

    fraction: the share of each head's features that rotate, the first fraction·head_dim (rounded down to an
    even number, at least 2); the rest pass unchanged (GPT-NeoX/Pythia 0.25, Phi 0.4). 1.0: all of them.
    """

    base: float = field(default=10000.0, validator=greater_than(1.0))
    layout: Literal["half", "interleaved"] = "half"  # "half": Hugging Face Llama; "interleaved": the RoFormer paper
    fraction: float = field(default=1.0, validator=[greater_than(0.0), in_range(0.0, 1.0, high_open=False)],
                            metadata=OMIT_DEFAULT)


def build_learned(config: LearnedConfig, ctx: BuildContext):
    from .learned import LearnedPositions

    return LearnedPositions(ctx.model.context_length, ctx.model.d_model)


def build_sinusoidal(config: SinusoidalConfig, ctx: BuildContext):
    from .sinusoidal import SinusoidalPositions

    return SinusoidalPositions(ctx.model.context_length, ctx.model.d_model, base=config.base)


def build_rope(config: RopeConfig, ctx: BuildContext):
    from .rope import RotaryPositions

    if ctx.model.head_dim % 2:
        raise ValueError(f"rope needs an even head_dim (d_model / n_heads or [model] head_dim), found {ctx.model.head_dim}")
    return RotaryPositions(ctx.model.head_dim, ctx.model.context_length, base=config.base, layout=config.layout,
                           fraction=config.fraction)


@hookimpl
def blockspec_register(register: Register) -> None:
    register("positional", "learned", LearnedConfig, build_learned, promises=("additive",))
    register("positional", "sinusoidal", SinusoidalConfig, build_sinusoidal,
             promises=("additive", "relative", "unbounded"))
    register("positional", "rope", RopeConfig, build_rope,
             promises=("rotary", "norm_preserving", "relative", "unbounded"))
