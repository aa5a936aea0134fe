"""blockspec-norms: LayerNorm and RMSNorm, on PyTorch's fused kernels."""

from __future__ import annotations

from attrs import field, frozen

from blockspec.plugin import OMIT_DEFAULT, BuildContext, Register, greater_than, hookimpl

BLOCKSPEC_API = 1


@frozen(kw_only=True)
class LayerNormConfig:
    """LayerNorm: centre and scale each token to mean 0, variance 1, then γ and β."""

    eps: float = field(default=1e-5, validator=greater_than(0.0))
    elementwise_affine: bool = True
    bias: bool = True


@frozen(kw_only=True)
class RMSNormConfig:
    """RMSNorm: divide each token by its root mean square, then γ (no centring).

    offset = true scales by (1 + w), w initialised to 0 (Gemma's stored weights); otherwise by γ, initialised to 1.
    """

    eps: float = field(default=1e-5, validator=greater_than(0.0))
    offset: bool = field(default=False, metadata=OMIT_DEFAULT)


def build_layernorm(config: LayerNormConfig, ctx: BuildContext):
    from torch import nn

    return nn.LayerNorm(ctx.model.d_model, eps=config.eps,
                        elementwise_affine=config.elementwise_affine, bias=config.bias)


def build_rmsnorm(config: RMSNormConfig, ctx: BuildContext):
    from torch import nn

    if config.offset:
        from .modules import OffsetRMSNorm

        return OffsetRMSNorm(ctx.model.d_model, eps=config.eps)
    return nn.RMSNorm(ctx.model.d_model, eps=config.eps)


@hookimpl
def blockspec_register(register: Register) -> None:
    register("norm", "layernorm", LayerNormConfig, build_layernorm,
             promises=("scale_invariant", "shift_invariant", "standardizes", "compiles"))
    register("norm", "rmsnorm", RMSNormConfig, build_rmsnorm, promises=("scale_invariant", "unit_rms", "offset_init",
                                                                    "compiles"))
