"""The plugin author's API: all that a component plugin imports, stable within API version 1.

Importing it loads no torch; the kind base classes (``PositionalEncoding``, ``Activation``)
and the tap functions (``tap``, ``tapping``: how a module shows its stages to ``blockspec trace``)
load torch on first use, so a plugin that imports them inside ``build`` keeps ``blockspec list``
fast. Everything else in blockspec is internal and may move between releases.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from blockspec.assembly.context import BuildContext
from blockspec.registry.hookspecs import API_VERSION, Build, Register, hookimpl
from blockspec.spec.schema import ModelConfig
from blockspec.spec.validators import at_least, greater_than, in_range, one_of, positive

if TYPE_CHECKING:
    from blockspec.modules.activation import Activation
    from blockspec.modules.positional import PositionalEncoding
    from blockspec.modules.taps import tap, tapping

_BASE_CLASSES = {
    "Activation": "blockspec.modules.activation",
    "PositionalEncoding": "blockspec.modules.positional",
    "tap": "blockspec.modules.taps",
    "tapping": "blockspec.modules.taps",
}


def __getattr__(name: str) -> object:
    if name in _BASE_CLASSES:
        return getattr(import_module(_BASE_CLASSES[name]), name)
    raise AttributeError(f"module 'blockspec.plugin' has no attribute {name!r}")


__all__ = [
    "API_VERSION",
    "Activation",
    "Build",
    "BuildContext",
    "ModelConfig",
    "PositionalEncoding",
    "Register",
    "at_least",
    "greater_than",
    "hookimpl",
    "in_range",
    "one_of",
    "positive",
    "tap",
    "tapping",
]
