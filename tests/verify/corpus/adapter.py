"""Adapters: LoRA with its update fused into one matmul (correct), and broken copies of blockspec-adapters' LoRA."""

from __future__ import annotations

import blockspec_adapters
import torch
import torch.nn.functional as F
from blockspec_adapters import LoraConfig
from blockspec_adapters.modules import LoraLinear
from torch import nn

from blockspec.plugin import BuildContext, linear_like
from tests.verify.corpus import Corpus, declared

CORPUS = Corpus()
LORA = declared(blockspec_adapters, "adapter", "lora")


def lora_as(cls: type[LoraLinear]):
    def build(config: LoraConfig, ctx: BuildContext) -> nn.Module:
        return cls(ctx.target, rank=config.rank, alpha=config.alpha, dropout=config.dropout, init=config.init)

    return build


class FusedLora(LoraLinear):
    """Correct: one matmul with W + scaling·B·A outside training (where dropout would act on the update alone)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            return super().forward(x)
        return F.linear(x, self.base_layer.weight + self.delta_weight(), self.base_layer.bias)


class BNotZero(LoraLinear):
    def __init__(self, base_layer: nn.Linear, **options) -> None:
        super().__init__(base_layer, **options)
        nn.init.kaiming_uniform_(self.lora_B.weight, a=5**0.5)  # BUG: B drawn like A; the update starts non-zero


class ScaledTwice(LoraLinear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling
        return self.base_layer(x) + update * self.scaling  # BUG: alpha/rank applied again


class MergeUnscaled(LoraLinear):
    def merged(self) -> nn.Linear:
        with torch.no_grad():  # BUG: B·A added without alpha/rank
            return linear_like(self.base_layer, self.base_layer.weight + self.lora_B.weight @ self.lora_A.weight)


class DropoutAtEval(LoraLinear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dropped = F.dropout(x, self.lora_dropout.p, training=True) if isinstance(self.lora_dropout, nn.Dropout) else x
        return self.base_layer(x) + self.lora_B(self.lora_A(dropped)) * self.scaling  # BUG: training=True always


class BiasOwned(LoraLinear):
    """Applies the base's bias itself, after the update, and so takes the bias out of the base layer."""

    def __init__(self, base_layer: nn.Linear, **options) -> None:
        super().__init__(base_layer, **options)
        self.bias = base_layer.bias  # BUG: the base's bias is now the adapter's: freezing the base misses it
        base_layer.bias = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base_layer(x) + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling
        return out if self.bias is None else out + self.bias

    def merged(self) -> nn.Linear:
        with torch.no_grad():
            merged = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None,
                               device=self.base_layer.weight.device, dtype=self.base_layer.weight.dtype)
            merged.weight.copy_(self.base_layer.weight + self.delta_weight())
            if self.bias is not None:
                merged.bias.copy_(self.bias)
            return merged


CORPUS.correct("adapter", "lora_fused", LoraConfig, lora_as(FusedLora), promises=LORA,
               why="the update fused into the base weight for one matmul outside training")
CORPUS.mutant("adapter", "lora_b_not_zero", LoraConfig, lora_as(BNotZero), like=LORA, catches="identity_at_init",
              bug="B initialised like A, not to zero: a fresh adapter already changes the layer")
CORPUS.mutant("adapter", "lora_scaled_twice", LoraConfig, lora_as(ScaledTwice), like=LORA, catches="mergeable",
              bug="alpha/rank applied twice in forward")
CORPUS.mutant("adapter", "lora_merge_unscaled", LoraConfig, lora_as(MergeUnscaled), like=LORA, catches="mergeable",
              bug="merged() adds B·A without alpha/rank")
CORPUS.mutant("adapter", "lora_dropout_at_eval", LoraConfig, lora_as(DropoutAtEval), like=LORA, catches="mergeable",
              bug="dropout on the update's input in eval mode too")
CORPUS.mutant("adapter", "lora_bias_owned", LoraConfig, lora_as(BiasOwned), like=LORA, catches="frozen_base",
              bug="the base's bias moved into the adapter: a frozen base leaves it trainable")
