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


class Refused(NotApplicable):
    """The component's build declined the drawn sizes with ValueError or TypeError, as the plugin API allows:
    those draws are not examples. ``error`` is what the build raised."""

    def __init__(self, error: ValueError | TypeError) -> None:
        self.error = error
        super().__init__(f"{type(error).__name__}: {error}")
