"""Hugging Face checkpoints both ways, for each family in ``interop.families.FAMILIES``.

Names load on first use: ``blockspec.sources`` imports this package and must stay cheap for the command line.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from blockspec.interop.hf_export import export_hf
    from blockspec.interop.hf_import import import_hf, spec_from_hf
    from blockspec.interop.peft_export import export_peft

_LAZY = {
    "export_hf": "blockspec.interop.hf_export",
    "export_peft": "blockspec.interop.peft_export",
    "import_hf": "blockspec.interop.hf_import",
    "spec_from_hf": "blockspec.interop.hf_import",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'blockspec.interop' has no attribute {name!r}")


__all__ = ["export_hf", "export_peft", "import_hf", "spec_from_hf"]
