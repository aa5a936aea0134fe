"""blockspec-activations: ReLU, GELU, SiLU and the gated SwiGLU and GeGLU."""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen

from blockspec.plugin import BuildContext, Register, greater_than, hookimpl

BLOCKSPEC_API = 1


@frozen(kw_only=True)
class ReLUConfig:
    """ReLU: max(0, x), the 2017 paper's FFN activation."""


@frozen(kw_only=True)
class GELUConfig:
    """GELU: x·Φ(x); approximate = "tanh" is GPT-2's variant."""

    approximate: Literal["none", "tanh"] = "none"


@frozen(kw_only=True)
class SiLUConfig:
    """SiLU (swish): x·sigmoid(x)."""


@frozen(kw_only=True)
class SwiGLUConfig:
    """SwiGLU: silu(gate)·value over two d_ff-wide branches (Llama)."""


@frozen(kw_only=True)
class GeGLUConfig:
    """GeGLU: gelu(gate)·value over two d_ff-wide branches."""

    approximate: Literal["none", "tanh"] = "none"


@frozen(kw_only=True)
class ClampedSwiGLUConfig:
    """gpt-oss's gated activation: gate g clamped above at limit, value u to ±limit, g·sigmoid(alpha·g)·(u + 1)."""

    alpha: float = field(default=1.702, validator=greater_than(0.0))
    limit: float = field(default=7.0, validator=greater_than(0.0))


def build_relu(config: ReLUConfig, ctx: BuildContext):
    from .modules import ReLU

    return ReLU()


def build_gelu(config: GELUConfig, ctx: BuildContext):
    from .modules import GELU

    return GELU(approximate=config.approximate)


def build_silu(config: SiLUConfig, ctx: BuildContext):
    from .modules import SiLU

    return SiLU()


def build_swiglu(config: SwiGLUConfig, ctx: BuildContext):
    from .modules import SwiGLU

    return SwiGLU()


def build_geglu(config: GeGLUConfig, ctx: BuildContext):
    from .modules import GeGLU

    return GeGLU(approximate=config.approximate)


def build_clamped_swiglu(config: ClampedSwiGLUConfig, ctx: BuildContext):
    from .modules import ClampedSwiGLU

    return ClampedSwiGLU(alpha=config.alpha, limit=config.limit)


@hookimpl
def blockspec_register(register: Register) -> None:
    register("activation", "relu", ReLUConfig, build_relu, promises=("elementwise", "compiles"))
    register("activation", "gelu", GELUConfig, build_gelu, promises=("elementwise", "compiles"))
    register("activation", "silu", SiLUConfig, build_silu, promises=("elementwise", "compiles"))
    register("activation", "swiglu", SwiGLUConfig, build_swiglu, promises=("gated", "compiles"))
    register("activation", "geglu", GeGLUConfig, build_geglu, promises=("gated", "compiles"))
    register("activation", "clamped_swiglu", ClampedSwiGLUConfig, build_clamped_swiglu, promises=("gated", "compiles"))
