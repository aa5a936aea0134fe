"""Named tap points: where a module shows an intermediate tensor to a tracer, at no cost otherwise.

A module marks a stage of its forward pass with ``x = tap(self, "name", x)``. Unless a
recorder is installed (``with recording(fn): ...``), ``tap`` returns its tensor untouched:
one function call and one ``is None`` test on a module global, which ``torch.compile``
folds away (the global is guarded, not traced), so compiled graphs do not break.

A tap whose name is one of the module's children (``tap(self, "norm1", self.norm1(x))``)
stands for that child's output: a tracer shows it as one stage when the child has no taps
of its own, and the child's inner stages when it has. Work that only a tracer needs goes
under ``if tapping():``.

One recorder at a time for the process (a module global, not thread-local): tracing is a
debugging tool, not something to run concurrently with training.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

Recorder = Callable[[nn.Module, str, torch.Tensor], None]

_recorder: Recorder | None = None


def tap(module: nn.Module, name: str, tensor: torch.Tensor) -> torch.Tensor:
    """Show ``tensor`` as ``module``'s stage ``name`` to the active recorder, if any; return it unchanged."""
    if _recorder is not None:
        _recorder(module, name, tensor)
    return tensor


def tapping() -> bool:
    """Whether a recorder is active: guard work done only to be tapped (e.g. attention weights)."""
    return _recorder is not None


@contextmanager
def recording(recorder: Recorder) -> Iterator[None]:
    """Within the block, every ``tap`` calls ``recorder(module, name, tensor)``; the previous recorder returns after."""
    global _recorder
    previous, _recorder = _recorder, recorder
    try:
        yield
    finally:
        _recorder = previous
