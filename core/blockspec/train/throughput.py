"""Model FLOPs utilisation: the model's training FLOPs per second over the device's *measured* matmul rate.

Only on a CUDA device, where the peak is measured in the same run (a datasheet figure is not what this
machine reaches); on a CPU no peak is measured and no MFU is reported.
"""

from __future__ import annotations

import time

import torch
from torch import nn

PEAK_SIZE = 8192  # square matmuls large enough to reach the tensor cores' sustained rate
PEAK_CALLS = 10


def flops_per_token(model: nn.Module, *, n_layers: int, d_model: int, context_length: int) -> float:
    """Training FLOPs per token, as PaLM counts them: 6·N for the weights (forward and backward), N every
    parameter but embedding tables, plus the tied head's matmul, and 12·L·d·T for attention's scores and mix."""
    tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    weights = sum(p.numel() for p in model.parameters() if id(p) not in tables)
    token_table = getattr(getattr(model, "embedding", None), "weight", None)
    head = getattr(model, "head", None)
    tied = token_table is not None and head is not None and any(p is token_table for p in head.parameters())
    head_matmul = token_table.numel() if tied else 0  # the token table, used again as the head
    return 6.0 * (weights + head_matmul) + 12.0 * n_layers * d_model * context_length


def measured_peak(device: torch.device, dtype: torch.dtype = torch.bfloat16) -> float | None:
    """FLOP/s of large ``dtype`` matmuls on ``device``, timed now; None off CUDA (no MFU on a CPU)."""
    if device.type != "cuda":
        return None
    a = torch.randn(PEAK_SIZE, PEAK_SIZE, device=device, dtype=dtype)
    b = torch.randn(PEAK_SIZE, PEAK_SIZE, device=device, dtype=dtype)
    torch.matmul(a, b)  # warm-up: kernel selection
    torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(PEAK_CALLS):
        torch.matmul(a, b)
    torch.cuda.synchronize(device)
    return 2.0 * PEAK_SIZE**3 * PEAK_CALLS / (time.perf_counter() - started)


def utilisation(tokens_per_s: float, per_token: float, peak: float | None) -> float | None:
    """MFU as a fraction of ``peak``; None when no peak was measured."""
    return None if not peak else tokens_per_s * per_token / peak
