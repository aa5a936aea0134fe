"""Norms: LayerNorm written out and an RMSNorm computed in at least float32 (correct), and broken copies."""

from __future__ import annotations

import blockspec_norms
import torch
from attrs import field, frozen
from blockspec_norms import LayerNormConfig, RMSNormConfig
from blockspec_norms.modules import OffsetRMSNorm
from torch import nn

from blockspec.plugin import BuildContext, greater_than
from tests.verify.corpus import DTYPES, Corpus, declared

CORPUS = Corpus()
LAYERNORM = declared(blockspec_norms, "norm", "layernorm")
RMSNORM = declared(blockspec_norms, "norm", "rmsnorm")


# --- correct: LayerNorm by hand, and the mutants that change one line of it ----------------------------

class HandLayerNorm(nn.LayerNorm):
    """nn.LayerNorm's parameters, the formula written out: (x - mean) / sqrt(var + eps), then γ and β."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.affine(self.standardize(x))

    def standardize(self, x: torch.Tensor) -> torch.Tensor:
        centred = x - x.mean(dim=-1, keepdim=True)
        return centred / torch.sqrt(centred.pow(2).mean(dim=-1, keepdim=True) + self.eps)

    def affine(self, y: torch.Tensor) -> torch.Tensor:
        y = y if self.weight is None else y * self.weight
        return y if self.bias is None else y + self.bias


class NoSqrt(HandLayerNorm):
    def standardize(self, x: torch.Tensor) -> torch.Tensor:
        centred = x - x.mean(dim=-1, keepdim=True)
        return centred / (centred.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # BUG: the square root is missing


class TokenAxis(HandLayerNorm):
    def standardize(self, x: torch.Tensor) -> torch.Tensor:
        centred = x - x.mean(dim=1, keepdim=True)  # BUG: dim 1, the features of (T, d), is the tokens of (B, N, d)
        return centred / torch.sqrt(centred.pow(2).mean(dim=1, keepdim=True) + self.eps)


class Unbiased(HandLayerNorm):
    def standardize(self, x: torch.Tensor) -> torch.Tensor:
        centred = x - x.mean(dim=-1, keepdim=True)
        return centred / torch.sqrt(x.var(dim=-1, keepdim=True) + self.eps)  # BUG: var() divides by d - 1


class ScaleFirst(HandLayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scaled = x if self.weight is None else x * self.weight  # BUG: γ applied before centring, not after
        y = self.standardize(scaled)
        return y if self.bias is None else y + self.bias


def layernorm_as(cls: type) -> object:
    def build(config: LayerNormConfig, ctx: BuildContext) -> nn.LayerNorm:
        return cls(ctx.model.d_model, eps=config.eps, elementwise_affine=config.elementwise_affine, bias=config.bias)

    return build


CORPUS.correct("norm", "layernorm_by_hand", LayerNormConfig, layernorm_as(HandLayerNorm), promises=LAYERNORM,
               why="LayerNorm written out: the one line each LayerNorm mutant changes, unchanged")
CORPUS.mutant("norm", "layernorm_no_sqrt", LayerNormConfig, layernorm_as(NoSqrt), like=LAYERNORM,
              catches="scale_invariant", bug="divides by the variance, not its square root")
CORPUS.mutant("norm", "layernorm_token_axis", LayerNormConfig, layernorm_as(TokenAxis), like=LAYERNORM,
              catches="standardizes", bug="mean and variance over dim 1: the tokens of a (B, N, d) input")
CORPUS.mutant("norm", "layernorm_unbiased", LayerNormConfig, layernorm_as(Unbiased), like=LAYERNORM,
              catches="standardizes", bug="the unbiased variance (d - 1), so tokens come out with variance (d-1)/d")
CORPUS.mutant("norm", "layernorm_scale_first", LayerNormConfig, layernorm_as(ScaleFirst), like=LAYERNORM,
              catches="shift_invariant", bug="γ multiplies x before centring: shift-invariant only while γ = 1")


# --- correct: RMSNorm in at least float32, cast back; and its mutants ---------------------------------

class Fp32RMSNorm(nn.RMSNorm):
    """Llama's RMSNorm: normalise in at least float32, cast back to the input's dtype, then γ."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        return self.weight * self.normalize(wide).to(x.dtype)

    def normalize(self, h: torch.Tensor) -> torch.Tensor:
        return h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)


class SumOfSquares(Fp32RMSNorm):
    def normalize(self, h: torch.Tensor) -> torch.Tensor:
        return h * torch.rsqrt(h.pow(2).sum(dim=-1, keepdim=True) + self.eps)  # BUG: sum where the mean belongs


class NeverCastBack(Fp32RMSNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        return self.weight * self.normalize(wide)  # BUG: the float32 result is never cast back to x's dtype


class OnesOffset(OffsetRMSNorm):
    def __init__(self, d_model: int, *, eps: float = 1e-5) -> None:
        super().__init__(d_model, eps=eps)
        self.weight = nn.Parameter(torch.ones(d_model))  # BUG: Gemma's (1 + w) scale with w starting at 1


def rmsnorm_as(cls: type, offset: type = OffsetRMSNorm) -> object:
    def build(config: RMSNormConfig, ctx: BuildContext) -> nn.Module:
        if config.offset:
            return offset(ctx.model.d_model, eps=config.eps)
        return cls(ctx.model.d_model, eps=config.eps)

    return build


CORPUS.correct("norm", "rmsnorm_fp32", RMSNormConfig, rmsnorm_as(Fp32RMSNorm), promises=RMSNORM,
               why="computes in at least float32 and casts back (Llama)")
CORPUS.mutant("norm", "rmsnorm_sum", RMSNormConfig, rmsnorm_as(SumOfSquares), like=RMSNORM, catches="unit_rms",
              bug="sum of squares instead of their mean: tokens come out with RMS 1/sqrt(d)")
CORPUS.mutant("norm", "rmsnorm_never_cast_back", RMSNormConfig, rmsnorm_as(NeverCastBack), like=RMSNORM,
              catches=DTYPES, bug="upcasts half precision to float32 and never casts back")
CORPUS.mutant("norm", "rmsnorm_offset_ones", RMSNormConfig, rmsnorm_as(nn.RMSNorm, offset=OnesOffset), like=RMSNORM,
              catches="offset_init", bug="offset = true stores w = 1, so the scale 1 + w starts at 2")


# --- correct: a field named like a promised option, meaning something else (issue 21, bug 7) -----------

@frozen(kw_only=True)
class ShiftedLayerNormConfig:
    """LayerNorm whose learned shift β is called ``offset`` (on by default): not Gemma's 1 + w."""

    eps: float = field(default=1e-5, validator=greater_than(0.0))
    offset: bool = True


def build_shifted_layernorm(config: ShiftedLayerNormConfig, ctx: BuildContext) -> nn.LayerNorm:
    return nn.LayerNorm(ctx.model.d_model, eps=config.eps, bias=config.offset)  # γ starts at 1, β at 0


CORPUS.correct("norm", "layernorm_offset_shift", ShiftedLayerNormConfig, build_shifted_layernorm, promises=LAYERNORM,
               why="its field `offset` is a learned shift, and it does not promise offset_init: the kit reads "
                   "an option only from a field whose promise the component makes")
