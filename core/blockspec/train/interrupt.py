"""Ctrl-C during training: finish the step, save a resumable checkpoint, then stop.

A ``KeyboardInterrupt`` raised in the middle of a step would leave some parameters updated and
others not, and nothing to resume from. While a run trains, the first SIGINT only asks it to
stop: the loop reads the request once per step (with the loss it already reads), saves at that
step's end and raises ``Interrupted``. A second SIGINT is a plain ``KeyboardInterrupt`` at once,
save or not: every save is one atomic directory write, so the last good checkpoint survives it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs


class Interrupted(KeyboardInterrupt):
    """The run stopped on Ctrl-C; the message says where, and ``saved`` is the checkpoint it saved there
    (None when it saved nothing: no checkpoint to write, or a second Ctrl-C during the save)."""

    def __init__(self, message: str, *, saved: str | Path | None = None) -> None:
        super().__init__(message)
        self.saved = saved


@attrs.define
class StopRequest:
    """Whether this process was asked to stop (the trainer agrees on it with every rank at a step's end)."""

    requested: bool = False


@contextmanager
def deferred_interrupt() -> Iterator[StopRequest]:
    """Within the block, the first SIGINT sets ``requested`` instead of raising; a second one raises.

    Only the main thread can hold a signal handler, and a handler a caller installed is theirs:
    then SIGINT keeps its meaning, and ``requested`` stays False.
    """
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield request
        return

    def on_sigint(number: int, frame: object) -> None:
        if request.requested:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        request.requested = True

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield request
    finally:
        signal.signal(signal.SIGINT, previous)
