"""TOML text for specs: tomli-w, kept under this name for the old ``blockspec.toml_text`` import path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tomli_w


def dumps(document: Mapping[str, Any]) -> str:
    """Tables in the given order, keys in the given order; strings escaped as TOML requires."""
    return tomli_w.dumps(document)
