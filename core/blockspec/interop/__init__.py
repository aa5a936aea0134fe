"""Interoperation with Hugging Face checkpoints, both directions, for each family in ``interop.families.FAMILIES``."""

from __future__ import annotations

from blockspec.interop.hf_export import export_hf
from blockspec.interop.hf_import import import_hf, spec_from_hf

__all__ = ["export_hf", "import_hf", "spec_from_hf"]
