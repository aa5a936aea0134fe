"""blockspec-extras: ALiBi position bias, ScaleNorm, squared ReLU and the ReZero block.

Written only against ``blockspec.plugin``, the stable plugin API, the way any outside plugin would be.
Configs stay torch-free, so discovering the plugin (``blockspec list``) is cheap;
the modules load when a component is built.
"""

from __future__ import annotations

from attrs import field, frozen

from blockspec.plugin import BuildContext, Register, greater_than, hookimpl

BLOCKSPEC_API = 1


@frozen(kw_only=True)
class ALiBiConfig:
    """ALiBi (Press et al. 2022): no position vectors; each head's scores fall linearly with distance."""


@frozen(kw_only=True)
class ScaleNormConfig:
    """ScaleNorm (Nguyen & Salazar 2019): g·x/||x|| with one learned scalar g, initialised to sqrt(d)."""

    eps: float = field(default=1e-5, validator=greater_than(0.0))


@frozen(kw_only=True)
class SquaredReLUConfig:
    """Squared ReLU (So et al. 2021, Primer): relu(x)²."""


@frozen(kw_only=True)
class ReZeroConfig:
    """ReZero (Bachlechner et al. 2021): x + α·f(x) per sublayer, no norms, α learned from alpha_init (0)."""

    alpha_init: float = 0.0


def build_alibi(config: ALiBiConfig, ctx: BuildContext):
    from .alibi import ALiBi

    return ALiBi(ctx.model.n_heads)


def build_scalenorm(config: ScaleNormConfig, ctx: BuildContext):
    from .scalenorm import ScaleNorm

    return ScaleNorm(ctx.model.d_model, eps=config.eps)


def build_squared_relu(config: SquaredReLUConfig, ctx: BuildContext):
    from .squared_relu import SquaredReLU

    return SquaredReLU()


def build_rezero(config: ReZeroConfig, ctx: BuildContext):
    from .rezero import ReZeroBlock

    if ctx.layer is None:
        raise TypeError("a block is built per layer: its BuildContext needs a layer factory (ctx.layer)")
    return ReZeroBlock(attn=ctx.layer.attention("attn"), ffn=ctx.layer.ffn("ffn"), alpha_init=config.alpha_init)


@hookimpl
def blockspec_register(register: Register) -> None:
    register("positional", "alibi", ALiBiConfig, build_alibi, promises=("score_bias", "relative", "unbounded",
                                                                        "compiles"))
    register("norm", "scalenorm", ScaleNormConfig, build_scalenorm,
             promises=("scale_invariant", "unit_rms", "compiles"))
    register("activation", "squared_relu", SquaredReLUConfig, build_squared_relu, promises=("elementwise", "compiles"))
    register("block", "rezero", ReZeroConfig, build_rezero, promises=("residual", "causal", "compiles"))
