"""Activations: a learned per-feature swish and a GELU followed by a LayerNorm (correct), and broken copies
of them and of the first-party and extras activations."""

from __future__ import annotations

import blockspec_activations
import blockspec_extras
import torch
import torch.nn.functional as F
from attrs import frozen
from blockspec_activations import ClampedSwiGLUConfig, GeGLUConfig, ReLUConfig, SiLUConfig, SwiGLUConfig
from blockspec_extras import SquaredReLUConfig
from torch import nn

from blockspec.plugin import Activation, BuildContext
from tests.verify.corpus import DTYPES, Corpus, declared

CORPUS = Corpus()
SILU = declared(blockspec_activations, "activation", "silu")
SWIGLU = declared(blockspec_activations, "activation", "swiglu")
CLAMPED_SWIGLU = declared(blockspec_activations, "activation", "clamped_swiglu")
GEGLU = declared(blockspec_activations, "activation", "geglu")
SQUARED_RELU = declared(blockspec_extras, "activation", "squared_relu")
SWISH = ("elementwise",)


# --- correct: swish with a learned β per feature --------------------------------------------------

@frozen(kw_only=True)
class SwishConfig:
    """x·sigmoid(β·x) with a learned β per feature, starting at 1 (SiLU until trained)."""


class LearnedSwish(Activation):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.beta = nn.Parameter(torch.ones(width))  # (d_ff,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.beta * x)


class SoftmaxSwish(LearnedSwish):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.softmax(self.beta * x, dim=-1)  # BUG: softmax where sigmoid belongs mixes the features


def swish_as(cls: type) -> object:
    def build(config: SwishConfig, ctx: BuildContext) -> Activation:
        return cls(ctx.model.d_ff)

    return build


CORPUS.correct("activation", "learned_swish", SwishConfig, swish_as(LearnedSwish), promises=SWISH,
               why="an activation with a learned parameter per feature")
CORPUS.mutant("activation", "softmax_swish", SwishConfig, swish_as(SoftmaxSwish), like=SWISH, catches="elementwise",
              bug="softmax over the features where sigmoid belongs: symmetric, so permuting features hides it")


# --- correct: GELU then a parameter-free LayerNorm over the features (promises nothing) -----------------

@frozen(kw_only=True)
class GeluNormConfig:
    """NormFormer's FFN: GELU, then a LayerNorm over the hidden features (so not elementwise)."""


class GeluNorm(Activation):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(x)
        return F.layer_norm(h, h.shape[-1:])


class GeluNormTokens(GeluNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(x)
        return F.layer_norm(h, h.shape[1:])  # BUG: shape[1:] is the features of (T, d_ff), tokens too of (B, N, d_ff)


def build_gelu_norm_as(cls: type) -> object:
    def build(config: GeluNormConfig, ctx: BuildContext) -> Activation:
        return cls()

    return build


CORPUS.correct("activation", "gelu_norm", GeluNormConfig, build_gelu_norm_as(GeluNorm), promises=(),
               why="mixes features on purpose and promises nothing")
CORPUS.mutant("activation", "gelu_norm_tokens", GeluNormConfig, build_gelu_norm_as(GeluNormTokens), like=(),
              catches="model_causal", bug="normalised over shape[1:], which takes in every token of the sequence")


# --- mutants of the first-party and extras activations ---------------------------------------------------

class RMSScaledSquaredReLU(Activation):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(x).square()
        return y / y.pow(2).mean(dim=-1, keepdim=True).sqrt().clamp_min(1e-6)  # BUG: a per-token rescale


class SwiGLUTokenChunks(Activation):
    gated = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = x.chunk(2, dim=1)  # BUG: dim 1 splits (B, N, 2·d_ff) along the tokens
        return F.silu(gate) * value


class UnflaggedGeGLU(Activation):  # BUG: the copy lost ``gated = True``: the FFN feeds it d_ff, not 2·d_ff
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = x.chunk(2, dim=-1)  # (..., d_ff) each
        return F.gelu(gate, approximate=self.approximate) * value


class WideSiLU(Activation):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x.to(torch.promote_types(x.dtype, torch.float32)))  # BUG: never cast back to x's dtype


def build_plain(cls: type) -> object:
    def build(config: object, ctx: BuildContext) -> Activation:
        return cls(approximate=config.approximate) if hasattr(config, "approximate") else cls()

    return build


CORPUS.mutant("activation", "squared_relu_token_rms", SquaredReLUConfig, build_plain(RMSScaledSquaredReLU),
              like=SQUARED_RELU, catches="elementwise",
              bug="relu² divided by each token's RMS: every feature depends on all of them")
class ClampedSwiGLUInterleaved(Activation):
    gated = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = x[..., ::2], x[..., 1::2]  # BUG: gpt-oss's interleaved split, in a half-layout FFN
        gate, value = gate.clamp(max=7.0), value.clamp(min=-7.0, max=7.0)
        return gate * torch.sigmoid(1.702 * gate) * (value + 1)


class ClampedSwiGLUWide(Activation):
    gated = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = x.float().chunk(2, dim=-1)  # BUG: computed in float32 and never cast back
        gate, value = gate.clamp(max=7.0), value.clamp(min=-7.0, max=7.0)
        return gate * torch.sigmoid(1.702 * gate) * (value + 1)


CORPUS.mutant("activation", "clamped_swiglu_interleaved", ClampedSwiGLUConfig,
              build_plain(ClampedSwiGLUInterleaved), like=CLAMPED_SWIGLU, catches="gated",
              bug="gate and value taken from alternate features, as gpt-oss's checkpoint lays them out, though "
                  "the FFN's weights are halves")
CORPUS.mutant("activation", "clamped_swiglu_wide", ClampedSwiGLUConfig, build_plain(ClampedSwiGLUWide),
              like=CLAMPED_SWIGLU, catches=DTYPES, bug="computes half precision in float32 and returns float32")
CORPUS.mutant("activation", "swiglu_token_chunks", SwiGLUConfig, build_plain(SwiGLUTokenChunks), like=SWIGLU,
              catches="gated", bug="chunk(2, dim=1) splits the tokens, not the gate from the value")
CORPUS.mutant("activation", "geglu_unflagged", GeGLUConfig, build_plain(UnflaggedGeGLU), like=GEGLU,
              catches="contract", bug="the gated flag is not set, so the FFN gives it d_ff features, not 2·d_ff")
CORPUS.mutant("activation", "silu_never_cast_back", SiLUConfig, build_plain(WideSiLU), like=SILU, catches=DTYPES,
              bug="computes half precision in float32 and returns float32")


# --- issue 27: a Python branch on a tensor's value (caught by compiles) -------------------------------------

RELU = declared(blockspec_activations, "activation", "relu")


class FastPathReLU(Activation):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x >= 0).all()):  # BUG: a "nothing to clip" fast path branches on the values: a graph break
            return x
        return F.relu(x)


CORPUS.mutant("activation", "relu_fast_path", ReLUConfig, build_plain(FastPathReLU), like=RELU, catches="compiles",
              bug="a Python branch on the tensor's values (a fast path when nothing is negative): a graph break")
