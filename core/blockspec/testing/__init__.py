"""blockspec.testing: the conformance kit. Hypothesis strategies and property checks for components.

Needs hypothesis (``pip install 'blockspec[testing]'``); ``import blockspec`` never imports it,
and neither does importing this package: names load on first use, so the pytest plugin
(``blockspec.testing.pytest_plugin``) stays free for suites that do not use the kit.

A plugin's test suite runs the whole kit with one line::

    from blockspec.testing import verify_distribution
    test_conformance = verify_distribution("my-distribution")
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from blockspec.testing.cases import Case
    from blockspec.testing.errors import NotApplicable, PropertyFailure
    from blockspec.testing.properties import PROPERTIES, Property, properties_for
    from blockspec.testing.pytest_plugin import verify_distribution
    from blockspec.testing.runner import Result, check, select, verify

_LAZY = {
    "Case": ".cases",
    "NotApplicable": ".errors",
    "PropertyFailure": ".errors",
    "PROPERTIES": ".properties",
    "Property": ".properties",
    "properties_for": ".properties",
    "Result": ".runner",
    "check": ".runner",
    "select": ".runner",
    "verify": ".runner",
    "verify_distribution": ".pytest_plugin",
}
HYPOTHESIS_MISSING = "the conformance kit needs hypothesis: pip install 'blockspec[testing]'"


def require_hypothesis() -> None:
    """Raise one clear ImportError when the ``testing`` extra is not installed."""
    try:
        import_module("hypothesis")
    except ImportError as error:
        raise ImportError(HYPOTHESIS_MISSING) from error


def __getattr__(name: str):
    if name in _LAZY:
        require_hypothesis()
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'blockspec.testing' has no attribute {name!r}")


__all__ = [
    "PROPERTIES",
    "Case",
    "NotApplicable",
    "Property",
    "PropertyFailure",
    "Result",
    "check",
    "properties_for",
    "require_hypothesis",
    "select",
    "verify",
    "verify_distribution",
]
