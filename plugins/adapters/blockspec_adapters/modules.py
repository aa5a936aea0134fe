"""LoRA and DoRA around an ``nn.Linear``, with PEFT's parameter names (lora_A, lora_B, lora_magnitude_vector)."""

from __future__ import annotations

import math

import torch
from torch import nn

from blockspec.plugin import Adapter, linear_like


class LoraLinear(Adapter):
    """base_layer(x) + scaling · lora_B(lora_A(dropout(x))), scaling = alpha / rank."""

    def __init__(self, base_layer: nn.Linear, *, rank: int, alpha: float, dropout: float, init: str) -> None:
        super().__init__(base_layer)
        if rank > min(base_layer.in_features, base_layer.out_features):
            raise ValueError(f"rank {rank} is larger than min(in, out) = "
                             f"{min(base_layer.in_features, base_layer.out_features)} of the layer")
        kwargs = dict(device=base_layer.weight.device, dtype=base_layer.weight.dtype)
        self.rank, self.alpha, self.scaling = rank, alpha, alpha / rank
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.lora_A = nn.Linear(base_layer.in_features, rank, bias=False, **kwargs)  # (r, in)
        self.lora_B = nn.Linear(rank, base_layer.out_features, bias=False, **kwargs)  # (out, r)
        if init == "gaussian":
            nn.init.normal_(self.lora_A.weight, std=1 / rank)
        else:
            nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)  # the update starts at zero: the layer starts as it was

    def delta_weight(self) -> torch.Tensor:
        """scaling · B·A, the (out, in) update the merge adds to the base weight."""
        return self.scaling * (self.lora_B.weight @ self.lora_A.weight)  # (out, r) @ (r, in) -> (out, in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base_layer(x) + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling

    def merged(self) -> nn.Linear:
        with torch.no_grad():
            return linear_like(self.base_layer, self.base_layer.weight + self.delta_weight())

    def extra_repr(self) -> str:
        return f"rank={self.rank}, alpha={self.alpha:g}"


class DoraLinear(LoraLinear):
    """LoRA's direction with a learned magnitude: m · (W + s·B·A) / ‖W + s·B·A‖ per output row, then the bias.

    The norm is treated as a constant in backward (detached), as DoRA's paper and PEFT do.
    """

    def __init__(self, base_layer: nn.Linear, *, rank: int, alpha: float, dropout: float, init: str) -> None:
        super().__init__(base_layer, rank=rank, alpha=alpha, dropout=dropout, init=init)
        with torch.no_grad():
            self.lora_magnitude_vector = nn.Parameter(self.weight_norm())  # (out,): ‖W‖ per row, so m/‖W‖ = 1

    def weight_norm(self) -> torch.Tensor:
        """‖W + s·B·A‖ over each output row: (out,)."""
        return torch.linalg.norm(self.base_layer.weight + self.delta_weight(), dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.base_layer(x)
        dropped = self.lora_dropout(x)
        base = result if dropped is x else nn.functional.linear(dropped, self.base_layer.weight)
        if dropped is x and self.base_layer.bias is not None:
            base = base - self.base_layer.bias
        scale = self.lora_magnitude_vector / self.weight_norm().detach()  # (out,)
        lora = self.lora_B(self.lora_A(dropped)) * self.scaling
        return result + (scale - 1) * base + scale * lora

    def merged(self) -> nn.Linear:
        with torch.no_grad():
            weight = self.base_layer.weight + self.delta_weight()
            factor = self.lora_magnitude_vector / torch.linalg.norm(weight, dim=1)  # (out,)
            return linear_like(self.base_layer, factor.view(-1, 1) * weight)  # (out,) -> (out, 1): scales each row
