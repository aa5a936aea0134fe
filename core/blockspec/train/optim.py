"""The optimizer's settings: the learning-rate schedule, which parameters decay, and mixed precision.

Schedule, for the step about to be taken (0-based ``s``, ``W`` warm-up steps, ``S`` total steps):

    s <  W:  lr · (s + 1) / W
    s >= W:  min_lr + (lr − min_lr) · ½ · (1 + cos(π · min(1, (s − W) / (S − W))))

With ``min_lr`` equal to ``lr`` (the default) and no warm-up the rate is constant.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

BETAS = (0.9, 0.99)


def learning_rate(step: int, *, lr: float, min_lr: float, warmup: int, steps: int) -> float:
    """The rate for 0-based ``step``: linear warm-up over ``warmup`` steps, then cosine down to ``min_lr`` at ``steps``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def decayed_names(model: nn.Module) -> set[str]:
    """Parameters that weight decay applies to: matrices (dim >= 2) that are not embedding tables.

    Norm gains and biases are vectors; a tied head's weight *is* the embedding, so it does not decay either.
    """
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    return {name for name, p in model.named_parameters() if p.dim() >= 2 and id(p) not in embeddings}


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two AdamW groups, always in this order: the decayed matrices, then everything else (no decay).

    Only trainable parameters: a frozen base (adapter fine-tuning) costs no optimizer state, not even an entry."""
    decayed = decayed_names(model)
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for n, p in named if n in decayed], "weight_decay": weight_decay},
            {"params": [p for n, p in named if n not in decayed], "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, *, lr: float, weight_decay: float) -> torch.optim.AdamW:
    return torch.optim.AdamW(parameter_groups(model, weight_decay), lr=lr, betas=BETAS)


def half_dtype(device: torch.device) -> torch.dtype:
    """bfloat16, except on a CUDA device without it, where float16 (with a GradScaler) stands in."""
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return torch.float16
    return torch.bfloat16


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """Mixed precision for ``bf16-mixed``: matmuls in half precision, weights and optimizer in float32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=half_dtype(device))


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """A loss scaler only where float16 stands in for bfloat16 (its range is too small for raw gradients)."""
    if precision == "fp32" or half_dtype(device) is not torch.float16:
        return None
    return torch.amp.GradScaler(device.type)


@contextlib.contextmanager
def no_gradient_sync(model: nn.Module, skip: bool) -> Iterator[None]:
    """Skip DDP's (or FSDP2's) gradient all-reduce on all but the last micro-batch of an accumulated step."""
    if skip and hasattr(model, "no_sync"):
        with model.no_sync():
            yield
        return
    if hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(not skip)
    yield
