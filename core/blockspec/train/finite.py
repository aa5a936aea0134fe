"""Non-finite numbers in training and generation: where the first one is, and the errors that say so.

A run whose loss or gradient norm turns NaN or Inf has diverged: every later step only spreads
the NaN through the weights, so the run stops there and saves nothing over its last good
checkpoint. A model whose weights hold NaN or Inf cannot generate anything meaningful.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from attrs import evolve

from blockspec.errors import BlockspecError, NonFiniteError, Problem


class DivergedError(BlockspecError, FloatingPointError):
    """A training run's loss or gradient norm became NaN or Inf at 1-based ``step`` of ``steps``; ``what`` says
    which ("the loss is nan"), as data, so a sweep can record it."""

    def __init__(self, problem: Problem, *, step: int, steps: int, what: str) -> None:
        super().__init__(problem)
        self.step, self.steps, self.what = step, steps, what

    def with_hint(self, kept: str) -> DivergedError:
        """The same error, first saying ``kept``: what still holds the run's last good state."""
        problem = self.problems[0]
        return DivergedError(evolve(problem, hint=f"{kept}; {problem.hint}"), step=self.step, steps=self.steps,
                             what=self.what)


def diverged(step: int, steps: int, what: str, *, lr: float) -> DivergedError:
    """The error of step ``step`` (1-based) of ``steps``, whose ``what`` ("the loss is nan") is not finite."""
    return DivergedError(Problem(message=f"training diverged at step {step} of {steps}: {what}",
                                 hint=f"lower {{lr}} (it was {lr:.3g} at this step; try {lr / 10:.3g})",
                                 names={"lr": "lr"}), step=step, steps=steps, what=what)


def non_finite(name: str, value: float) -> str | None:
    """``"the loss is nan"`` when ``value`` is NaN or Inf; None when it is finite."""
    return None if math.isfinite(value) else f"the {name} is {value}"


def first_non_finite(tensors: Iterable[tuple[str, torch.Tensor]]) -> str | None:
    """The name of the first floating tensor holding NaN or Inf; None when all are finite (one read of the device).

    Each tensor's sum is NaN or Inf when it holds one, and a sum reads the tensor once, where ``isfinite``
    makes several passes and a mask: only tensors whose sum is not finite (a NaN, or finite values that
    overflow the sum) are looked at element by element."""
    named = [(name, t.to_local() if hasattr(t, "to_local") else t) for name, t in tensors]  # FSDP: this rank's shard
    named = [(name, t) for name, t in named if t.is_floating_point() and t.numel()]
    if not named:
        return None
    device = named[0][1].device
    sums = torch.stack([t.sum(dtype=torch.float32).to(device) for _, t in named])  # (tensors,)
    suspects = [named[i] for i in torch.isfinite(sums).logical_not().nonzero()[:, 0].tolist()]
    return next((name for name, t in suspects if not bool(torch.isfinite(t).all())), None)


def check_finite_weights(model: torch.nn.Module, *, source: str) -> None:
    """Refuse a model whose weights hold NaN or Inf (a diverged run's), naming the first such tensor.

    The weights are read once per change: a model whose tensors are the ones checked last time, none written
    since (each tensor's version counter counts its in-place writes), is not read again, so generating
    twice from one model pays for one check."""
    state = model.state_dict(keep_vars=True)  # the parameters themselves: their identity and counters last
    versions = _versions(state)
    if versions is not None and getattr(model, _CHECKED, None) == versions:
        return
    name = first_non_finite((key, t.detach()) for key, t in state.items())
    if name is not None:
        raise NonFiniteError(f"{source}: the weight {name} holds NaN or Inf, so nothing the model computes means "
                             "anything; retrain it (with a lower learning rate, if its training diverged)",
                             module_path=name.rpartition(".")[0])
    if versions is not None:
        object.__setattr__(model, _CHECKED, versions)  # not a module attribute: no state, no repr


_CHECKED = "_blockspec_finite_versions"  # the weights (identity, storage, writes) last found finite


def _versions(state: dict[str, torch.Tensor]) -> tuple | None:
    """Each tensor's identity, storage and count of in-place writes; None when a tensor keeps no count
    (an inference tensor), so the weights are read every time."""
    try:
        return tuple((name, id(t), t.data_ptr(), t._version) for name, t in state.items())
    except RuntimeError:
        return None


def non_finite_logits(source: str) -> NonFiniteError:
    """The error of generation whose logits came out NaN or Inf from finite weights (an overflow)."""
    return NonFiniteError(f"{source}: the logits are not finite (NaN or Inf) although the weights are: the model "
                          "overflows on this prompt; try another prompt, or fp32 weights", module_path="")
