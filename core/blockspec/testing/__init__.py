"""blockspec.testing: the conformance kit. Hypothesis strategies and property checks for components.

Running the kit needs hypothesis (``pip install 'blockspec[testing]'``); ``import blockspec`` never
imports it, and neither does importing this package: names load on first use, so the pytest plugin
(``blockspec.testing.pytest_plugin``) stays free for suites that do not use the kit. The properties
themselves (``PROPERTIES``, ``Property``, ``Case``) need only torch: the load-time probe
(``blockspec.testing.probe``) runs each kind's ``contract`` property on one fixed case without hypothesis.

A plugin's test suite runs the whole kit with one line::

    from blockspec.testing import verify_distribution
    test_conformance = verify_distribution("my-distribution")
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from blockspec.testing.cases import Case, installed
    from blockspec.testing.errors import NotApplicable, PropertyFailure
    from blockspec.testing.models import build_model
    from blockspec.testing.properties import PROPERTIES, Property, properties_for
    from blockspec.testing.pytest_plugin import verify_distribution
    from blockspec.testing.runner import Result, check, select, verify

_LAZY = {  # name -> (module, needs hypothesis)
    "Case": (".cases", False),
    "installed": (".cases", False),
    "NotApplicable": (".errors", False),
    "PropertyFailure": (".errors", False),
    "build_model": (".models", False),
    "PROPERTIES": (".properties", False),
    "Property": (".properties", False),
    "properties_for": (".properties", False),
    "Result": (".runner", True),
    "check": (".runner", True),
    "select": (".runner", True),
    "verify": (".runner", True),
    "verify_distribution": (".pytest_plugin", True),
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
        module, needs_hypothesis = _LAZY[name]
        if needs_hypothesis:
            require_hypothesis()
        return getattr(import_module(module, __name__), name)
    raise AttributeError(f"module 'blockspec.testing' has no attribute {name!r}")


__all__ = [
    "PROPERTIES",
    "Case",
    "NotApplicable",
    "Property",
    "PropertyFailure",
    "Result",
    "build_model",
    "check",
    "installed",
    "properties_for",
    "require_hypothesis",
    "select",
    "verify",
    "verify_distribution",
]
