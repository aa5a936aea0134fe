"""blockspec-blocks: the layer wirings beyond the core's pre- and post-norm blocks.

``parallel``, ``sandwich`` and ``output_norm`` are the layouts of GPT-J/Falcon, Gemma 2/3 and
OLMo 2. Each block builds its sublayers through ``ctx.layer``. ``pre`` and ``post`` (what
``[model] norm_placement`` names) are the core's, registered as it registers ``causal``.
"""

from __future__ import annotations

from attrs import frozen

from blockspec.plugin import BuildContext, Register, hookimpl

BLOCKSPEC_API = 1


@frozen(kw_only=True)
class ParallelConfig:
    """Parallel (GPT-J, Falcon): x + attn(norm1(x)) + ffn(norm2(x)); shared_norm: one norm feeds both."""

    shared_norm: bool = False


@frozen(kw_only=True)
class SandwichConfig:
    """Sandwich (Gemma 2/3): x + norm_post(f(norm_pre(x))) per sublayer: four norms."""


@frozen(kw_only=True)
class OutputNormConfig:
    """Output norm (OLMo 2): x + norm(f(x)) per sublayer."""


def _layer(ctx: BuildContext):
    if ctx.layer is None:
        raise TypeError("a block is built per layer: its BuildContext needs a layer factory (ctx.layer)")
    return ctx.layer


def build_parallel(config: ParallelConfig, ctx: BuildContext):
    from blockspec_blocks.modules import ParallelBlock

    layer = _layer(ctx)
    norm1, attn = layer.norm("norm1"), layer.attention("attn")
    norm2 = None if config.shared_norm else layer.norm("norm2")
    return ParallelBlock(norm1=norm1, attn=attn, norm2=norm2, ffn=layer.ffn("ffn"), dropout=layer.dropout)


def build_sandwich(config: SandwichConfig, ctx: BuildContext):
    from blockspec_blocks.modules import SandwichBlock

    layer = _layer(ctx)
    return SandwichBlock(norm1=layer.norm("norm1"), attn=layer.attention("attn"),
                         post_attn_norm=layer.norm("post_attn_norm"), norm2=layer.norm("norm2"),
                         ffn=layer.ffn("ffn"), post_ffn_norm=layer.norm("post_ffn_norm"), dropout=layer.dropout)


def build_output_norm(config: OutputNormConfig, ctx: BuildContext):
    from blockspec_blocks.modules import OutputNormBlock

    layer = _layer(ctx)
    return OutputNormBlock(attn=layer.attention("attn"), norm1=layer.norm("norm1"), ffn=layer.ffn("ffn"),
                           norm2=layer.norm("norm2"), dropout=layer.dropout)


@hookimpl
def blockspec_register(register: Register) -> None:
    promises = ("residual", "causal", "compiles")
    register("block", "parallel", ParallelConfig, build_parallel, promises=(*promises, "parallel"))
    register("block", "sandwich", SandwichConfig, build_sandwich, promises=promises)
    register("block", "output_norm", OutputNormConfig, build_output_norm, promises=promises)
