"""Head modules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn


class TiedLMHead(nn.Module):
    """Logits from the embedding matrix itself: the same Parameter, no copy (drawn as the token embedding)."""

    def __init__(self, embedding: nn.Embedding, *, logit_softcap: float | None = None, bias: bool = False) -> None:
        super().__init__()
        self.weight = embedding.weight  # shared storage with the token embedding
        self.bias = nn.Parameter(torch.zeros(embedding.num_embeddings)) if bias else None  # (|V|,) its own
        self.logit_softcap = logit_softcap

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = _logits(x, self.weight)  # (B, N, d) -> (B, N, |V|)
        return softcap(logits if self.bias is None else logits + self.bias, self.logit_softcap)

    def logit_columns(self, x: torch.Tensor, begin: int, end: int) -> torch.Tensor:
        """forward(x)[..., begin:end], computing those logits alone."""
        return column_logits(self, x, begin, end)


FEW_ROWS = 64  # decoding's rows: one position of each sequence of a batch


def _logits(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (B, N, d) @ weightᵀ -> (B, N, |V|). For a few rows on the CPU as weight @ xᵀ, which BLAS runs as one
    pass over the (|V|, d) matrix: with GPT-2's 50,257 x 768 embedding, 8 rows took 9.9 ms against 14.5 ms
    for ``F.linear`` (2 threads), 1 row 4.0 against 4.3 ms."""
    rows = x.shape[:-1].numel()
    if x.device.type != "cpu" or rows > FEW_ROWS:
        return F.linear(x, weight)
    flat = x.reshape(rows, x.shape[-1])  # (B, N, d) -> (B·N, d)
    return (weight @ flat.T).T.reshape(*x.shape[:-1], weight.shape[0])  # (|V|, B·N) -> (B·N, |V|) -> (B, N, |V|)


class UntiedLMHead(nn.Linear):
    """An untied head, its logits soft-capped (cap·tanh(logits/cap)) when ``logit_softcap`` is set. Its weight
    is named as nn.Linear's; its initialisation is declared by whoever builds it (``declare_init``)."""

    def __init__(self, d_model: int, vocab_size: int, *, logit_softcap: float | None = None,
                 bias: bool = False) -> None:
        super().__init__(d_model, vocab_size, bias=bias)
        self.logit_softcap = logit_softcap

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softcap(super().forward(x), self.logit_softcap)  # (B, N, |V|)

    def logit_columns(self, x: torch.Tensor, begin: int, end: int) -> torch.Tensor:
        """forward(x)[..., begin:end], computing those logits alone."""
        return column_logits(self, x, begin, end)

    def extra_repr(self) -> str:
        cap = "" if self.logit_softcap is None else f", logit_softcap={self.logit_softcap:g}"
        return super().extra_repr() + cap


def column_logits(head: TiedLMHead | UntiedLMHead, x: torch.Tensor, begin: int, end: int) -> torch.Tensor:
    """Either lm head's logits of tokens begin..end-1 alone: its weight and bias rows, then its cap."""
    bias = None if head.bias is None else head.bias[begin:end]
    return softcap(F.linear(x, head.weight[begin:end], bias), head.logit_softcap)  # (..., d) -> (..., end - begin)


def softcap(logits: torch.Tensor, cap: float | None) -> torch.Tensor:
    """cap·tanh(logits/cap): near the identity for small logits, never beyond ±cap; None: unchanged."""
    return logits if cap is None else cap * torch.tanh(logits / cap)


class Classifier(nn.Module):
    """(B, N, d) -> pool over N -> (B, C)."""

    init_roles: ClassVar[Mapping[str, str]] = {"linear.weight": "std", "linear.bias": "zero"}  # the spec's [init]

    def __init__(self, d_model: int, n_classes: int, *, pooling: str = "last", bias: bool = True) -> None:
        super().__init__()
        self.pooling = pooling
        self.linear = nn.Linear(d_model, n_classes, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = x[:, -1] if self.pooling == "last" else x.mean(dim=1)  # (B, d)
        return self.linear(pooled)
