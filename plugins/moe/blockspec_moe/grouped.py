"""One linear map per expert over tokens sorted by expert, as one operator that torch.compile sees whole.

Why an operator: the groups' sizes are data. A Python loop over them needs the sizes on the host (a sync,
and under torch.compile a graph break). Registered as a custom operator with a shape-only fake, the
traced graph holds one fixed-shape call whatever the routing. Inside it, ``F.grouped_mm`` runs every
group in one kernel, reading the group ends from a tensor, when the strides allow it (16-byte aligned
rows: every real model size); otherwise a loop over the groups does the same arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

_GROUPED_MM = getattr(F, "grouped_mm", None)  # torch >= 2.10; older versions take the loop
_ALIGNMENT = 16  # bytes: grouped_mm's rule for row strides and data pointers
_GROUPED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def grouped_linear(x: torch.Tensor, weight: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Rows of x (S, in), sorted by expert, times each expert's weight (E, out, in) -> (S, out).

    ``ends`` (E,) int32: where each expert's rows end (the cumulative group sizes). Differentiable in x
    and weight; under autocast both are cast to the autocast dtype first, as ``F.linear`` would be.
    """
    if not x.is_meta and torch.is_autocast_enabled(x.device.type):
        dtype = torch.get_autocast_dtype(x.device.type)
        x, weight = x.to(dtype), weight.to(dtype)
    weight = weight.to(x.dtype)
    if not (torch.compiler.is_compiling() or x.is_meta) and _GROUPED_MM is not None and _fits_grouped_mm(x, weight):
        # eager: grouped_mm's own autograd, ~0.3 ms a call cheaper than a Python operator's; under
        # torch.compile or on the meta device the operator, whose fake takes every dtype (grouped_mm's
        # takes bfloat16 only)
        return _GROUPED_MM(x, weight.transpose(-2, -1), offs=ends)  # (S, in) @ (E, in, out) -> (S, out)
    return torch.ops.blockspec_moe.grouped_linear(x, weight, ends)


def _fits_grouped_mm(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether grouped_mm's kernel takes x (S, in) and weight (E, out, in), forward and backward: a float
    dtype it has, contiguous operands at 16-byte aligned addresses, and rows of in and out elements that
    are whole multiples of 16 bytes (every real model size; not, say, d_ff = 7)."""
    size = x.element_size()
    return (x.dtype in _GROUPED_DTYPES and weight.dtype == x.dtype
            and x.is_contiguous() and weight.is_contiguous()
            and x.data_ptr() % _ALIGNMENT == 0 and weight.data_ptr() % _ALIGNMENT == 0
            and weight.shape[1] * size % _ALIGNMENT == 0 and weight.shape[2] * size % _ALIGNMENT == 0)


def _starts_and_ends(ends: torch.Tensor) -> list[tuple[int, int, int]]:
    """(expert, first row, end row) of every non-empty group: the loop's one read of the sizes."""
    bounds = [0, *ends.tolist()]
    return [(e, start, end) for e, (start, end) in enumerate(zip(bounds, bounds[1:])) if end > start]


def _per_group(rows: int, width: int, ends: torch.Tensor, like: torch.Tensor,
               product: Callable[[int, int, int], torch.Tensor]) -> torch.Tensor:
    """(rows, width) zeros, each group's rows filled by ``product(expert, start, end)``."""
    out = like.new_zeros(rows, width)
    for e, start, end in _starts_and_ends(ends):
        out[start:end] = product(e, start, end)
    return out


@torch.library.custom_op("blockspec_moe::grouped_linear", mutates_args=())
def _grouped_linear(x: torch.Tensor, weight: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    if _GROUPED_MM is not None and _fits_grouped_mm(x, weight):
        return _GROUPED_MM(x, weight.transpose(-2, -1), offs=ends)  # (S, in) @ (E, in, out) -> (S, out)
    return _per_group(x.shape[0], weight.shape[1], ends, x, lambda e, a, b: x[a:b] @ weight[e].T)


@_grouped_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], weight.shape[1])


@torch.library.custom_op("blockspec_moe::grouped_linear_backward", mutates_args=())
def _grouped_linear_backward(x: torch.Tensor, weight: torch.Tensor, ends: torch.Tensor,
                             grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """d/dx (S, in) = grad_e @ W_e per group; d/dW_e (out, in) = grad_eᵀ @ x_e."""
    if _GROUPED_MM is not None and _fits_grouped_mm(x, weight) and grad.data_ptr() % _ALIGNMENT == 0:
        return _GROUPED_MM(grad, weight, offs=ends), _GROUPED_MM(grad.t(), x, offs=ends)  # (S, in), (E, out, in)
    grad_x = _per_group(x.shape[0], x.shape[1], ends, x, lambda e, a, b: grad[a:b] @ weight[e])
    grad_weight = torch.zeros_like(weight)
    for e, start, end in _starts_and_ends(ends):
        grad_weight[e] = grad[start:end].T @ x[start:end]
    return grad_x, grad_weight


@_grouped_linear_backward.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, ends: torch.Tensor,
      grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(weight)


def _save(ctx, inputs, output) -> None:
    x, weight, ends = inputs
    ctx.save_for_backward(x, weight, ends)


def _backward(ctx, grad: torch.Tensor):
    x, weight, ends = ctx.saved_tensors
    grad_x, grad_weight = torch.ops.blockspec_moe.grouped_linear_backward(x, weight, ends, grad.contiguous())
    return grad_x, grad_weight, None


_grouped_linear.register_autograd(_backward, setup_context=_save)
