"""Every property the kit knows, in the order ``blockspec verify`` shows them.

Each check is a plain function ``check(component, case, device)``; a Property wraps
it with the promise it tests and turns a failure into a PropertyFailure naming
component, distribution and property.
"""

from __future__ import annotations

from .activation import ACTIVATION
from .attention import ATTENTION
from .base import Property, assert_close, assert_like, assert_shape
from .head import HEAD
from .model import MODEL
from .norm import NORM
from .positional import POSITIONAL
from .universal import UNIVERSAL

PROPERTIES: tuple[Property, ...] = (
    *POSITIONAL, *NORM, *ACTIVATION, *HEAD, *ATTENTION, *UNIVERSAL, *MODEL,
)


def properties_for(kind: str) -> tuple[Property, ...]:
    """The properties that concern a component of ``kind`` (declared or not)."""
    return tuple(p for p in PROPERTIES if p.kind in (None, kind))


def find(name: str, kind: str) -> Property:
    for prop in properties_for(kind):
        if prop.name == name:
            return prop
    raise LookupError(f"no property {name!r} for kind {kind!r}")


__all__ = ["PROPERTIES", "Property", "assert_close", "assert_like", "assert_shape", "find", "properties_for"]
