"""Head modules."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class TiedLMHead(nn.Module):
    """Logits from the embedding matrix itself: the same Parameter, no copy."""

    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__()
        self.weight = embedding.weight  # shared storage with the token embedding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)  # (B, N, d) -> (B, N, |V|)


class Classifier(nn.Module):
    """(B, N, d) -> pool over N -> (B, C)."""

    def __init__(self, d_model: int, n_classes: int, *, pooling: str = "last", bias: bool = True) -> None:
        super().__init__()
        self.pooling = pooling
        self.linear = nn.Linear(d_model, n_classes, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = x[:, -1] if self.pooling == "last" else x.mean(dim=1)  # (B, d)
        return self.linear(pooled)
