"""blockspec-adapters: LoRA and DoRA, following PEFT's LoRA layer (scaling, initialisation, DoRA's magnitude)."""

from __future__ import annotations

from attrs import field, frozen

from blockspec.plugin import BuildContext, Register, hookimpl, in_range, one_of, positive

BLOCKSPEC_API = 1
INITS = ("kaiming", "gaussian")


@frozen(kw_only=True)
class LoraConfig:
    """A low-rank update (alpha/rank)·B·A beside a linear layer; B starts at zero, so the layer starts unchanged.

    rank: the inner width r of B·A (at most min(in, out) of every layer it wraps).
    alpha: the update's scale is alpha / rank (PEFT's lora_alpha).
    dropout: the probability of zeroing the update's input in training.
    init: A's initialisation: "kaiming" (uniform, PEFT's default) or "gaussian" (std 1/rank).
    """

    rank: int = field(default=8, validator=positive)
    alpha: float = 8.0
    dropout: float = field(default=0.0, validator=in_range(0.0, 1.0))
    init: str = field(default="kaiming", validator=one_of(INITS))


def build_lora(config: LoraConfig, ctx: BuildContext):
    from .modules import LoraLinear

    return LoraLinear(_target(ctx), rank=config.rank, alpha=config.alpha, dropout=config.dropout, init=config.init)


def build_dora(config: LoraConfig, ctx: BuildContext):
    from .modules import DoraLinear

    return DoraLinear(_target(ctx), rank=config.rank, alpha=config.alpha, dropout=config.dropout, init=config.init)


def _target(ctx: BuildContext):
    if ctx.target is None:
        raise ValueError("an adapter wraps a linear layer: the build context has no target")
    return ctx.target


@hookimpl
def blockspec_register(register: Register) -> None:
    promises = ("identity_at_init", "mergeable", "compiles")
    register("adapter", "lora", LoraConfig, build_lora, promises=promises)
    register("adapter", "dora", LoraConfig, build_dora, promises=promises,
             summary="LoRA with a learned magnitude per output feature (weight-decomposed, DoRA)")
