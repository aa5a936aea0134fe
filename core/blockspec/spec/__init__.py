"""The spec: its schema, reading and writing TOML, the strict converter, problems and validators. No torch.

``blockspec.spec`` was a module before it was this package; its names still resolve here
(``from blockspec.spec import ModelSpec``), with a DeprecationWarning naming ``blockspec.spec.schema``.
"""

from __future__ import annotations

import warnings
from importlib import import_module

_FROM_THE_OLD_MODULE = frozenset({"ComponentSpec", "MAX_LAYERS", "ModelConfig", "ModelSpec", "NormPlacement"})


def __getattr__(name: str):
    if name in _FROM_THE_OLD_MODULE:
        warnings.warn(f"blockspec.spec.{name} moved to blockspec.spec.schema; import it from there",
                      DeprecationWarning, stacklevel=2)
        value = globals()[name] = getattr(import_module("blockspec.spec.schema"), name)  # warn once per name
        return value
    raise AttributeError(f"module 'blockspec.spec' has no attribute {name!r}")
