"""The CPU thread rule of every training run (`blockspec train`, each run of a sweep), in one place.

Tiny models spend their time in thread hand-offs: one intra-op thread each is fastest, and shares
a busy machine well. The count also decides the order CPU kernels sum in, so two runs of the same
settings give the same losses only under the same count: the rule is the run's, not a command's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

SMALL_MODEL = 5_000_000  # parameters: below this, one intra-op thread is fastest on CPU


def rule_threads(threads: int | None, model: torch.nn.Module, device: torch.device) -> int | None:
    """The intra-op thread count a run on ``device`` trains with; None: leave torch's as it is.

    ``threads`` (asked for) wins on a CPU; unasked, ``OMP_NUM_THREADS`` (torchrun sets it) decides,
    else one thread for a model under ``SMALL_MODEL`` parameters, else torch's default.
    """
    if device.type != "cpu":
        return None
    if threads is not None:
        return max(threads, 1)
    if "OMP_NUM_THREADS" in os.environ:
        return None
    parameters = sum(p.numel() for p in model.parameters())
    return 1 if parameters < SMALL_MODEL else None


@contextmanager
def training_threads(threads: int | None, model: torch.nn.Module, device: torch.device) -> Iterator[None]:
    """Within the block, torch uses the rule's thread count; after it, the count it had (a notebook keeps its own)."""
    import torch  # here, so that the command line reads SMALL_MODEL without importing torch

    chosen, before = rule_threads(threads, model, device), torch.get_num_threads()
    if chosen is not None:
        torch.set_num_threads(chosen)
    try:
        yield
    finally:
        if chosen is not None:
            torch.set_num_threads(before)
