"""The adapter kind's base class: a module that wraps one ``nn.Linear`` of a built model.

The assembler swaps each targeted linear layer for what the adapter's build returns, so the
wrapper keeps the layer as ``base_layer`` (PEFT's name: an export to its layout is a renaming)
and adds its own parameters beside it. Whether the base is frozen is the caller's choice
(``freeze_base``), never the wrapper's.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn


class Adapter(nn.Module):
    """A wrapped linear layer: ``forward`` computes the adapted layer, ``merged()`` folds it into one."""

    base_layer: nn.Linear

    def __init__(self, base_layer: nn.Linear) -> None:
        super().__init__()
        self.base_layer = base_layer

    @property
    def in_features(self) -> int:
        return self.base_layer.in_features

    @property
    def out_features(self) -> int:
        return self.base_layer.out_features

    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` computing what this adapter computes in eval mode (a new module, base untouched)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement merged()")

    def adapter_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """The adapter's own parameters (everything not under ``base_layer``), by name below this module."""
        for name, parameter in self.named_parameters():
            if not name.startswith("base_layer."):
                yield name, parameter

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - every adapter defines its own
        raise NotImplementedError


def linear_like(base: nn.Linear, weight: torch.Tensor) -> nn.Linear:
    """A new ``nn.Linear`` of ``base``'s shape, dtype and device holding ``weight`` and a copy of ``base``'s bias."""
    merged = nn.Linear(base.in_features, base.out_features, bias=base.bias is not None,
                       device=base.weight.device, dtype=base.weight.dtype)
    with torch.no_grad():
        merged.weight.copy_(weight)
        if base.bias is not None:
            merged.bias.copy_(base.bias)
    return merged


def freeze_base(model: nn.Module) -> int:
    """Make only the adapters' own parameters trainable; returns how many numbers stay trainable."""
    own = {id(p) for module in model.modules() if isinstance(module, Adapter) for _, p in module.adapter_parameters()}
    for parameter in model.parameters():
        parameter.requires_grad_(id(parameter) in own)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state-dict entries the adapters own (none under a ``base_layer``): what an adapter checkpoint holds."""
    base_parts = {f"{path}.base_layer." for path, module in model.named_modules() if isinstance(module, Adapter)}
    owners = tuple(f"{path}." for path, module in model.named_modules() if isinstance(module, Adapter))
    return {name: tensor for name, tensor in model.state_dict(keep_vars=True).items()
            if name.startswith(owners) and not name.startswith(tuple(base_parts))}
