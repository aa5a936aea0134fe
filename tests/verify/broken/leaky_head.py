"""An "lm" head that mixes in the mean over all positions, so logits at i see tokens after i."""

from __future__ import annotations

import torch
from attrs import frozen
from torch import nn

from blockspec import BuildContext, hookimpl


@frozen(kw_only=True)
class LeakyConfig:
    """Logits from each token plus the sequence mean (wrong)."""


class LeakyHead(nn.Module):
    def __init__(self, d_model: int, vocab_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x + x.mean(dim=1, keepdim=True))  # (B, N, d) + (B, 1, d)


def build(config: LeakyConfig, ctx: BuildContext) -> nn.Module:
    return LeakyHead(ctx.model.d_model, ctx.model.vocab_size)


@hookimpl
def blockspec_register(register) -> None:
    register("head", "leaky", LeakyConfig, build, promises=("lm",))
