"""A T5 bucketed relative bias that assumes as many queries as keys: query i sits at position i.

Uncached (n_q = n_k) it is T5's causal bias exactly, so it is relative and passes ``relative``.
Decoding through a cache (n_q = 1 query, n_k = start + 1 keys) it puts the query at position 0:
every cached key then looks like the query's own position and falls in bucket 0.
"""

from __future__ import annotations

import math

import torch
from attrs import frozen
from torch import nn

from blockspec import BuildContext, hookimpl
from blockspec.modules.positional import PositionalEncoding


@frozen(kw_only=True)
class SquareT5Config:
    """T5's causal bucketed bias, 32 buckets up to distance 128, top-left aligned (wrong under a cache)."""


def buckets(distance: torch.Tensor, n_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """T5's causal buckets of distance = query - key >= 0: exact below n_buckets/2, logarithmic above."""
    distance = distance.clamp_min(0)
    exact = n_buckets // 2
    far = exact + (torch.log(distance.float().clamp_min(1) / exact) / math.log(max_distance / exact)
                   * (n_buckets - exact)).long()
    return torch.where(distance < exact, distance, far.clamp_max(n_buckets - 1))


class SquareT5Bias(PositionalEncoding):
    biases = True

    def __init__(self, n_heads: int) -> None:
        super().__init__(max_positions=None)
        self.table = nn.Embedding(32, n_heads)

    def score_bias(self, n_q: int, n_k: int, start: int = 0) -> torch.Tensor:
        device = self.table.weight.device
        queries = torch.arange(n_q, device=device)  # should be arange(n_k - n_q, n_k)
        keys = torch.arange(n_k, device=device)
        bucket = buckets(queries[:, None] - keys[None, :])  # (n_q, n_k)
        return self.table(bucket).permute(2, 0, 1)  # (h, n_q, n_k)


def build(config: SquareT5Config, ctx: BuildContext) -> PositionalEncoding:
    return SquareT5Bias(ctx.model.n_heads)


@hookimpl
def blockspec_register(register) -> None:
    register("positional", "square_t5_bias", SquareT5Config, build, promises=("score_bias", "relative", "unbounded"))
