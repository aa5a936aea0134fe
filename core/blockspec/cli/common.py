"""Helpers shared by subcommands: loading the registry with visible warnings, tables, JSON."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from blockspec.registry.loading import PluginWarning, load_registry
from blockspec.registry.components import Registry


def registry_with_warnings(*, probe: bool | None = None) -> Registry:
    """Load plugins; each quarantined one (or policy typo) becomes one warning line on stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PluginWarning)
        registry = load_registry(probe=probe)
    for warning in caught:
        if issubclass(warning.category, PluginWarning):
            print(f"blockspec: warning: {warning.message}", file=sys.stderr)
        else:  # not ours: hand it back to the warnings machinery unchanged
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return registry


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()) -> None:
    """Plain aligned columns; ``right`` lists the columns to right-align (numbers)."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def fmt(row: Sequence[str]) -> str:
        cells = [str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        return "  ".join(cells).rstrip()

    print(fmt(header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(fmt(row))
