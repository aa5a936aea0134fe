"""Constructing a model without initialising what will be overwritten anyway.

``nn.Linear`` and ``nn.Embedding`` run their default initialisation in ``__init__``; the
build then overwrites those weights with GPT-2's, and a load overwrites every weight with
the file's. At GPT-2 small that wasted first pass is most of the build. ``DeferredInit``
records the ``torch.nn.init`` calls made during construction instead of running them.
``finish`` then runs, in their original order, the ones whose tensor is not about to be
overwritten. A recorded tensor that construction touches again (reads its values, fills a
padding row) gets its recorded calls run first, so every module sees what an eager
construction would show it. Only the order of random draws differs: the same seed still
gives the same weights.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.nn import init
from torch.overrides import TorchFunctionMode

# The torch.nn.init functions that dispatch through __torch_function__ (the others run at once).
DEFERRABLE = frozenset({init.uniform_, init.normal_, init.constant_, init.kaiming_uniform_})
# Reads of a tensor's metadata, not its values: they need no recorded call to run first.
METADATA = frozenset({
    torch.Tensor.dim, torch.Tensor.size, torch.Tensor.numel, torch.Tensor.is_floating_point,
    torch.Tensor.element_size, torch.Tensor.stride, torch.Tensor.is_contiguous,
    torch.Tensor.shape.__get__, torch.Tensor.ndim.__get__, torch.Tensor.dtype.__get__,
    torch.Tensor.device.__get__, torch.Tensor.requires_grad.__get__, torch.Tensor.is_meta.__get__,
    torch.Tensor.layout.__get__, torch.Tensor.is_sparse.__get__, torch.Tensor.grad_fn.__get__,
    torch.Tensor.grad.__get__, torch.Tensor.is_leaf.__get__,
})


class DeferredInit(TorchFunctionMode):
    """Within ``with DeferredInit() as deferred:``, nn.init calls wait for ``deferred.finish``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[torch.Tensor, Any, tuple, dict]] = []  # (target, function, args, kwargs)
        self.waiting: set[int] = set()  # ids of targets with recorded calls; self.calls keeps them alive

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in DEFERRABLE:
            target = args[0] if args else kwargs["tensor"]
            self.calls.append((target, func, args, kwargs))
            self.waiting.add(id(target))
            return target
        if self.waiting and func not in METADATA:
            self._run_for(_tensors_in(args, kwargs))
        return func(*args, **kwargs)

    def finish(self, overwritten: Iterable[torch.Tensor] = ()) -> None:
        """Run the recorded calls, in order, except those on tensors about to be overwritten."""
        skipped = {id(tensor) for tensor in overwritten}
        calls, self.calls, self.waiting = self.calls, [], set()
        with torch.no_grad():
            for target, func, args, kwargs in calls:
                if id(target) not in skipped:
                    func(*args, **kwargs)

    def _run_for(self, tensors: list[torch.Tensor]) -> None:
        """Run the recorded calls of ``tensors`` now: construction is about to use their values."""
        due = {id(t) for t in tensors} & self.waiting
        if not due:
            return
        ready = [call for call in self.calls if id(call[0]) in due]
        self.calls = [call for call in self.calls if id(call[0]) not in due]
        self.waiting -= due
        with torch.no_grad():
            for _, func, args, kwargs in ready:
                func(*args, **kwargs)


def _tensors_in(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors among a call's arguments, looking one level into lists and tuples (torch.cat)."""
    found = []
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found
