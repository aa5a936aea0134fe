"""Blocks: a pre-norm block with LayerDrop (correct), and broken copies of it and of the first-party and
extras blocks."""

from __future__ import annotations

import blockspec_blocks
import blockspec_extras
import torch
import torch.nn.functional as F
from attrs import field, frozen
from blockspec_blocks import OutputNormConfig, ParallelConfig, SandwichConfig
from blockspec_blocks.modules import OutputNormBlock, ParallelBlock, SandwichBlock
from blockspec_extras import ReZeroConfig
from blockspec_extras.rezero import ReZeroBlock

from blockspec.assembly import builtin
from blockspec.assembly.builtin import PreConfig
from blockspec.plugin import BuildContext, LayerCache, PositionalEncoding, PreNormBlock, attend, in_range
from tests.verify.corpus import MODEL_CACHE, Corpus, declared

CORPUS = Corpus()
PRE = declared(builtin, "block", "pre")
SANDWICH = declared(blockspec_blocks, "block", "sandwich")
OUTPUT_NORM = declared(blockspec_blocks, "block", "output_norm")
PARALLEL = declared(blockspec_blocks, "block", "parallel")
REZERO = declared(blockspec_extras, "block", "rezero")
PRE_PARTS = ("norm1", "attn", "norm2", "ffn")


def _parts(ctx: BuildContext, names: tuple[str, ...]) -> dict:
    """The sublayers ``names`` (attn, ffn, norm1, ...) from ctx.layer, in the order given."""
    layer = ctx.layer
    made = {"attn": lambda: layer.attention("attn"), "ffn": lambda: layer.ffn("ffn")}
    return {name: made[name]() if name in made else layer.norm(name) for name in names}


# --- correct: pre-norm with LayerDrop, random in training only -----------------------------------------

@frozen(kw_only=True)
class LayerDropConfig:
    """Pre-norm, and in training the whole layer is skipped with probability layer_drop (Fan et al. 2019)."""

    layer_drop: float = field(default=0.2, validator=in_range(0.0, 1.0))


class LayerDropBlock(PreNormBlock):
    def __init__(self, *, layer_drop: float, **parts) -> None:
        super().__init__(**parts)
        self.layer_drop = layer_drop

    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        return x if self.skips() else super().forward(x, positional, start, cache)

    def skips(self) -> bool:
        return self.training and bool(torch.rand(()) < self.layer_drop)


class LayerDropInEval(LayerDropBlock):
    def skips(self) -> bool:
        return bool(torch.rand(()) < self.layer_drop)  # BUG: no self.training check, layers vanish at inference


def layer_drop_as(cls: type) -> object:
    def build(config: LayerDropConfig, ctx: BuildContext) -> PreNormBlock:
        return cls(layer_drop=config.layer_drop, dropout=ctx.layer.dropout, **_parts(ctx, PRE_PARTS))

    return build


CORPUS.correct("block", "layer_drop", LayerDropConfig, layer_drop_as(LayerDropBlock),
               promises=tuple(p for p in PRE if p != "compiles"),  # bool(torch.rand(()) < p): a host sync
               why="random in training, deterministic in eval")
CORPUS.mutant("block", "layer_drop_in_eval", LayerDropConfig, layer_drop_as(LayerDropInEval), like=PRE,
              catches="deterministic", bug="LayerDrop without the training check: random at inference")


# --- mutants of pre, sandwich, output-norm and ReZero ------------------------------------------------

class ResidualAfterNorm(PreNormBlock):
    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        x = self.norm1(x)  # BUG: the residual stream is normalised, not just the sublayer's input
        x = x + self.drop(attend(self.attn, x, positional, start, cache))
        return x + self.drop(self.ffn(self.norm2(x)))


class NormOnStream(SandwichBlock):
    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        a = attend(self.attn, self.norm1(x), positional, start, cache)
        x = self.post_attn_norm(x + a)  # BUG: the post norm wraps the residual add, not the sublayer
        return self.post_ffn_norm(x + self.ffn(self.norm2(x)))


class AlphaOnStream(ReZeroBlock):
    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        x = self.alpha_attn * (x + attend(self.attn, x, positional, start, cache))  # BUG: α scales the sum
        return self.alpha_ffn * (x + self.ffn(x))


class ForgetsCache(OutputNormBlock):
    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        a = self.attn(x, positional, start)  # BUG: the cache is not passed on, so decoding sees no prefix
        x = x + self.drop(self.norm1(a))
        return x + self.drop(self.norm2(self.ffn(x)))


def block_as(cls: type, names: tuple[str, ...]) -> object:
    def build(config: object, ctx: BuildContext) -> torch.nn.Module:
        return cls(dropout=ctx.layer.dropout, **_parts(ctx, names))

    return build


def build_alpha_on_stream(config: ReZeroConfig, ctx: BuildContext) -> ReZeroBlock:
    return AlphaOnStream(alpha_init=config.alpha_init, **_parts(ctx, ("attn", "ffn")))


SANDWICH_PARTS = ("norm1", "attn", "post_attn_norm", "norm2", "ffn", "post_ffn_norm")
CORPUS.mutant("block", "pre_residual_after_norm", PreConfig, block_as(ResidualAfterNorm, PRE_PARTS), like=PRE,
              catches="residual", bug="the residual is taken after the input norm")
CORPUS.mutant("block", "sandwich_norm_on_stream", SandwichConfig, block_as(NormOnStream, SANDWICH_PARTS),
              like=SANDWICH, catches="residual", bug="the post-sublayer norms wrap the residual add")
CORPUS.mutant("block", "rezero_alpha_on_stream", ReZeroConfig, build_alpha_on_stream, like=REZERO,
              catches="residual", bug="α multiplies x + f(x) instead of f(x)")
CORPUS.mutant("block", "output_norm_forgets_cache", OutputNormConfig,
              block_as(ForgetsCache, ("attn", "norm1", "ffn", "norm2")), like=OUTPUT_NORM, catches=MODEL_CACHE,
              bug="the attention is called without the layer's cache")


class ParallelInSequence(ParallelBlock):
    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        a = attend(self.attn, self.norm1(x), positional, start, cache)
        g = (self.norm1 if self.shared_norm else self.norm2)(x + a)  # BUG: the FFN reads x + attn, in sequence
        return x + self.drop(a) + self.drop(self.ffn(g))


def build_parallel_in_sequence(config: ParallelConfig, ctx: BuildContext) -> ParallelBlock:
    names = ("norm1", "attn", "ffn") if config.shared_norm else ("norm1", "attn", "norm2", "ffn")
    parts = _parts(ctx, names)
    return ParallelInSequence(norm2=parts.pop("norm2", None), dropout=ctx.layer.dropout, **parts)


CORPUS.mutant("block", "parallel_in_sequence", ParallelConfig, build_parallel_in_sequence, like=PARALLEL,
              catches="parallel", bug="the FFN's norm reads x + attn(norm1(x)), not x: a sequential block")


# --- BLOOM (issue 27): layer 0 alone normalises the embeddings first, so the layers' counts differ ---------

@frozen(kw_only=True)
class EmbeddingNormConfig:
    """Pre-norm, and the first layer normalises its input (BLOOM's word_embeddings_layernorm)."""


class EmbeddingNormBlock(PreNormBlock):
    """x -> pre-norm block of embedding_norm(x) in layer 0, of x in the others."""

    def __init__(self, *, embedding_norm: torch.nn.Module | None, **parts) -> None:
        super().__init__(**parts)
        self.embedding_norm = embedding_norm

    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        x = x if self.embedding_norm is None else self.embedding_norm(x)
        return super().forward(x, positional, start, cache)


def build_embedding_norm(config: EmbeddingNormConfig, ctx: BuildContext) -> EmbeddingNormBlock:
    layer = ctx.layer
    first = layer.norm("embedding_norm") if layer.index == 0 else None
    return EmbeddingNormBlock(embedding_norm=first, **_parts(ctx, PRE_PARTS), dropout=layer.dropout)


CORPUS.correct("block", "embedding_norm_first", EmbeddingNormConfig, build_embedding_norm, promises=("causal",),
               why="BLOOM: an extra norm in layer 0 only, so one layer's count does not serve every layer")


# --- issue 27: the layer's own sublayers, its index and dropout, and compiling ---------------------------

def build_own_layernorms(config: PreConfig, ctx: BuildContext) -> PreNormBlock:
    layer, d = ctx.layer, ctx.model.d_model
    return PreNormBlock(norm1=torch.nn.LayerNorm(d), attn=layer.attention("attn"),  # BUG: not layer.norm("norm1"):
                        norm2=torch.nn.LayerNorm(d), ffn=layer.ffn("ffn"), dropout=layer.dropout)  # LayerNorm always


class DropoutAlways(PreNormBlock):
    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        p = self.drop.p
        x = x + F.dropout(attend(self.attn, self.norm1(x), positional, start, cache), p, training=True)  # BUG
        return x + F.dropout(self.ffn(self.norm2(x)), p, training=True)  # BUG: training=True, eval or not


class ItemSync(PreNormBlock):
    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        self.input_rms = x.pow(2).mean().sqrt().item()  # BUG: a host sync for a statistic, every step
        return super().forward(x, positional, start, cache)


class IndexScaled(PreNormBlock):
    def __init__(self, *, index: int, **parts) -> None:
        super().__init__(**parts)
        self.index = index

    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        scale = (self.index + 1) ** -0.5 if self.index > 0 else 1.0  # BUG: a depth-scaled init leaking into forward
        x = x + scale * self.drop(attend(self.attn, self.norm1(x), positional, start, cache))
        return x + scale * self.drop(self.ffn(self.norm2(x)))


def build_index_scaled(config: PreConfig, ctx: BuildContext) -> PreNormBlock:
    return IndexScaled(index=ctx.layer.index, dropout=ctx.layer.dropout, **_parts(ctx, PRE_PARTS))


CORPUS.mutant("block", "pre_own_layernorm", PreConfig, build_own_layernorms, like=PRE, catches="pre_norm",
              bug="the block builds nn.LayerNorm norms itself instead of the spec's [norm] through ctx.layer")
CORPUS.mutant("block", "pre_dropout_in_eval", PreConfig, block_as(DropoutAlways, PRE_PARTS), like=PRE,
              catches="eval_is_deterministic", bug="F.dropout(..., training=True): dropout at inference too")
CORPUS.mutant("block", "pre_item_sync", PreConfig, block_as(ItemSync, PRE_PARTS), like=PRE, catches="compiles",
              bug="a .item() in forward to keep a statistic: a host sync, so the graph breaks")
CORPUS.mutant("block", "pre_index_scaled", PreConfig, build_index_scaled, like=PRE, catches="pre_norm",
              bug="sublayer outputs scaled by 1/sqrt(index + 1) past layer 0: not the pre-norm the block promises")


# --- correct: DeepNorm and LayerScale -----------------------------------------------------------------

@frozen(kw_only=True)
class DeepNormConfig:
    """DeepNet (Wang et al. 2022): norm(α·x + f(x)) per sublayer, α = (2·n_layers)^(1/4)."""


class DeepNormBlock(torch.nn.Module):
    def __init__(self, *, attn, ffn, norm1, norm2, alpha: float, dropout: float) -> None:
        super().__init__()
        self.attn, self.norm1, self.ffn, self.norm2, self.alpha = attn, norm1, ffn, norm2, alpha
        self.drop = torch.nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        x = self.norm1(self.alpha * x + self.drop(attend(self.attn, x, positional, start, cache)))
        return self.norm2(self.alpha * x + self.drop(self.ffn(x)))


def build_deepnorm(config: DeepNormConfig, ctx: BuildContext) -> DeepNormBlock:
    alpha = (2 * max(ctx.model.n_layers, 1)) ** 0.25
    return DeepNormBlock(alpha=alpha, dropout=ctx.layer.dropout, **_parts(ctx, ("attn", "norm1", "ffn", "norm2")))


@frozen(kw_only=True)
class LayerScaleConfig:
    """CaiT's LayerScale (Touvron et al. 2021): x + γ⊙f(norm(x)) per sublayer, γ per channel from init."""

    init: float = field(default=1e-4, validator=in_range(0.0, 1.0))


class LayerScaleBlock(PreNormBlock):
    def __init__(self, *, init: float, width: int, **parts) -> None:
        super().__init__(**parts)
        self.gamma_attn = torch.nn.Parameter(torch.full((width,), init))  # (d,)
        self.gamma_ffn = torch.nn.Parameter(torch.full((width,), init))  # (d,)

    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        x = x + self.gamma_attn * self.drop(attend(self.attn, self.norm1(x), positional, start, cache))
        return x + self.gamma_ffn * self.drop(self.ffn(self.norm2(x)))


def build_layer_scale(config: LayerScaleConfig, ctx: BuildContext) -> LayerScaleBlock:
    return LayerScaleBlock(init=config.init, width=ctx.model.d_model, dropout=ctx.layer.dropout,
                           **_parts(ctx, PRE_PARTS))


CORPUS.correct("block", "deepnorm", DeepNormConfig, build_deepnorm, promises=("causal", "compiles"),
               why="post-norm with the residual scaled by α: promises neither residual nor post_norm")
CORPUS.correct("block", "layer_scale", LayerScaleConfig, build_layer_scale, promises=("residual", "causal", "compiles"),
               why="pre-norm with a learned per-channel gain on each sublayer: not pre_norm's formula")
