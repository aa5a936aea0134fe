"""Every property the kit knows, in the order ``blockspec verify`` shows them.

Each check is a plain function ``check(component, case, device)``; a Property wraps
it with the promise it tests and turns a failure into a PropertyFailure naming
component, distribution and property.
"""

from __future__ import annotations

from blockspec.testing.properties.activation import ACTIVATION
from blockspec.testing.properties.adapter import ADAPTER
from blockspec.testing.properties.attention import ATTENTION
from blockspec.testing.properties.block import BLOCK
from blockspec.testing.properties.cache import CACHE, MODEL_CACHE
from blockspec.testing.properties.compile import COMPILE
from blockspec.testing.properties.determinism import DETERMINISM
from blockspec.testing.properties.ffn import FFN
from blockspec.testing.properties.base import Property, assert_close, assert_like, assert_shape
from blockspec.testing.properties.head import HEAD
from blockspec.testing.properties.model import MODEL
from blockspec.testing.properties.norm import NORM
from blockspec.testing.properties.positional import POSITIONAL
from blockspec.testing.properties.rope import ROPE
from blockspec.testing.properties.universal import UNIVERSAL

PROPERTIES: tuple[Property, ...] = (
    *POSITIONAL, *ROPE, *NORM, *ACTIVATION, *HEAD, *ATTENTION, *BLOCK, *FFN, *ADAPTER, *CACHE, *UNIVERSAL, *MODEL, *MODEL_CACHE,
    *COMPILE, *DETERMINISM,
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
