"""The optional answer a module gives for the parameters one token passes through (a mixture of experts')."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class ActiveParameters(Protocol):
    """A module some of whose parameters each token skips: it answers how many of its own (its whole
    subtree's, each counted once) one token passes through. ``assembly/counting.py`` asks it."""

    def active_parameters(self) -> int: ...
