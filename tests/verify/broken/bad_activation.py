"""An "elementwise" activation that doubles the width of what it is given."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from attrs import frozen

from blockspec import BuildContext, hookimpl
from blockspec.modules.activation import Activation


@frozen(kw_only=True)
class WideningConfig:
    """ReLU, concatenated with itself (wrong)."""


class Widening(Activation):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat((F.relu(x), F.relu(-x)), dim=-1)  # (..., 2·d_ff)


def build(config: WideningConfig, ctx: BuildContext) -> Activation:
    return Widening()


@hookimpl
def blockspec_register(register) -> None:
    register("activation", "widening", WideningConfig, build, promises=("elementwise",))
