"""Heads: broken copies of the first-party lm head (tied, untied, soft-capped) and classifier."""

from __future__ import annotations

import blockspec_heads
import torch
import torch.nn.functional as F
from blockspec_heads import ClassifierConfig, LMHeadConfig
from blockspec_heads.modules import Classifier, TiedLMHead, UntiedLMHead, softcap
from torch import nn

from blockspec.plugin import BuildContext
from tests.verify.corpus import DTYPES, Corpus, declared

CORPUS = Corpus()
LM = declared(blockspec_heads, "head", "lm")
CLASSIFIER = declared(blockspec_heads, "head", "classifier")


class CopiedHead(TiedLMHead):
    def __init__(self, embedding: nn.Embedding, *, logit_softcap: float | None = None) -> None:
        super().__init__(embedding, logit_softcap=logit_softcap)
        self.weight = nn.Parameter(embedding.weight.detach().clone())  # BUG: a copy of the matrix, not the matrix


class TokenLogSoftmax(TiedLMHead):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = softcap(F.linear(x, self.weight), self.logit_softcap)  # (B, N, |V|)
        return F.log_softmax(logits, dim=1)  # BUG: normalised over the tokens (dim 1), not the vocabulary


class WideLogits(TiedLMHead):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = torch.promote_types(x.dtype, torch.float32)  # BUG: logits in float32, never cast back
        return softcap(F.linear(x.to(wide), self.weight.to(wide)), self.logit_softcap)


def lm_as(tied: type = TiedLMHead) -> object:
    """build_lm, with ``tied`` for the tied head."""

    def build(config: LMHeadConfig, ctx: BuildContext) -> nn.Module:
        if config.tied:
            return tied(ctx.embedding, logit_softcap=config.logit_softcap)
        return UntiedLMHead(ctx.model.d_model, ctx.model.vocab_size, logit_softcap=config.logit_softcap)

    return build


def build_capped_untied(config: LMHeadConfig, ctx: BuildContext) -> nn.Module:
    if config.logit_softcap is not None:  # BUG: checked first, so a capped head is never tied
        return UntiedLMHead(ctx.model.d_model, ctx.model.vocab_size, logit_softcap=config.logit_softcap)
    if config.tied:
        return TiedLMHead(ctx.embedding)
    return UntiedLMHead(ctx.model.d_model, ctx.model.vocab_size)


def build_uncapped_untied(config: LMHeadConfig, ctx: BuildContext) -> nn.Module:
    if config.tied:
        return TiedLMHead(ctx.embedding, logit_softcap=config.logit_softcap)
    return UntiedLMHead(ctx.model.d_model, ctx.model.vocab_size)  # BUG: the untied head drops the cap


class UncappedColumns(TiedLMHead):
    def logit_columns(self, x: torch.Tensor, begin: int, end: int) -> torch.Tensor:
        return F.linear(x, self.weight[begin:end])  # BUG: the slice's logits skip the soft cap forward applies


class ColumnsFromOne(TiedLMHead):
    def logit_columns(self, x: torch.Tensor, begin: int, end: int) -> torch.Tensor:
        logits = softcap(F.linear(x, self.weight), self.logit_softcap)  # (..., |V|)
        return logits[..., begin + 1:end + 1]  # BUG: columns counted from 1, off by one token


class TiedWithoutBias(TiedLMHead):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softcap(F.linear(x, self.weight), self.logit_softcap)  # BUG: [head] bias = true, but none is added


def lm_with_bias(tied: type) -> object:
    """build_lm, with ``tied`` for the tied head, passing [head] bias on."""

    def build(config: LMHeadConfig, ctx: BuildContext) -> nn.Module:
        if config.tied:
            return tied(ctx.embedding, logit_softcap=config.logit_softcap, bias=config.bias)
        return UntiedLMHead(ctx.model.d_model, ctx.model.vocab_size, logit_softcap=config.logit_softcap,
                            bias=config.bias)

    return build


class FeatureMean(Classifier):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = x[:, -1] if self.pooling == "last" else x.mean(dim=-1)  # BUG: the features' mean, not the tokens'
        return self.linear(pooled)


def build_feature_mean(config: ClassifierConfig, ctx: BuildContext) -> nn.Module:
    return FeatureMean(ctx.model.d_model, config.n_classes, pooling=config.pooling, bias=config.bias)


CORPUS.mutant("head", "lm_copied", LMHeadConfig, lm_as(CopiedHead), like=LM, catches="tied",
              bug="tied = true copies the embedding matrix instead of sharing it")
CORPUS.mutant("head", "lm_capped_untied", LMHeadConfig, build_capped_untied, like=LM, catches="tied",
              bug="a soft-capped head is built untied whatever tied says")
CORPUS.mutant("head", "lm_uncapped_untied", LMHeadConfig, build_uncapped_untied, like=LM, catches="logit_softcap",
              bug="the untied head ignores logit_softcap")
CORPUS.mutant("head", "lm_token_log_softmax", LMHeadConfig, lm_as(TokenLogSoftmax), like=LM, catches="positionwise",
              bug="log-softmax over dim 1, the tokens, instead of the vocabulary")
CORPUS.mutant("head", "lm_wide_logits", LMHeadConfig, lm_as(WideLogits), like=LM, catches=DTYPES,
              bug="half-precision input gives float32 logits")
CORPUS.mutant("head", "lm_uncapped_columns", LMHeadConfig, lm_as(UncappedColumns), like=LM, catches="logit_columns",
              bug="logit_columns leaves out the soft cap that forward applies")
CORPUS.mutant("head", "lm_columns_from_one", LMHeadConfig, lm_as(ColumnsFromOne), like=LM, catches="logit_columns",
              bug="logit_columns slices the vocabulary one token late")
CORPUS.mutant("head", "lm_tied_without_bias", LMHeadConfig, lm_with_bias(TiedWithoutBias), like=LM,
              catches="logit_columns", bug="a tied head with [head] bias = true never adds its bias")
CORPUS.mutant("head", "classifier_feature_mean", ClassifierConfig, build_feature_mean, like=CLASSIFIER,
              catches="contract", bug="mean pooling over the features (dim -1) instead of the tokens")
