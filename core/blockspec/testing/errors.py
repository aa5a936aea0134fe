"""How a property reports: a failure that names component, distribution and property."""

from __future__ import annotations


class PropertyFailure(AssertionError):
    """A component broke a promise; the message says which component, whose, and which property."""

    def __init__(self, component: str, distribution: str, prop: str, detail: str) -> None:
        self.component = component
        self.distribution = distribution
        self.property = prop
        self.detail = detail
        super().__init__(f"{component} (from {distribution}) fails {prop}: {detail}")


class NotApplicable(Exception):
    """Raised by a check that finds, once the module is built, that it cannot measure this module."""
