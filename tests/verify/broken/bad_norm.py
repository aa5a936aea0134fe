"""A "norm" that only centres: shift invariant, as promised, but not scale invariant, as also promised."""

from __future__ import annotations

import torch
from attrs import frozen
from torch import nn

from blockspec import BuildContext, hookimpl


@frozen(kw_only=True)
class CentreConfig:
    """Subtracts each token's mean and stops there."""


class Centre(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(dim=-1, keepdim=True)


def build(config: CentreConfig, ctx: BuildContext) -> nn.Module:
    return Centre()


@hookimpl
def blockspec_register(register) -> None:
    register("norm", "centre_only", CentreConfig, build, promises=("scale_invariant", "shift_invariant"))
