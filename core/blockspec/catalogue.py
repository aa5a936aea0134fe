"""The catalogue of first-party plugins (registry.toml): who provides what."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib.resources import files
from pathlib import Path

CATALOGUE_NAME = "registry.toml"


def _catalogue_text() -> str | None:
    shipped = files("blockspec") / CATALOGUE_NAME  # inside a built wheel
    if shipped.is_file():
        return shipped.read_text(encoding="utf-8")
    checkout = Path(__file__).resolve().parents[2] / CATALOGUE_NAME  # editable install
    return checkout.read_text(encoding="utf-8") if checkout.is_file() else None


@cache
def catalogue() -> dict[str, dict]:
    """distribution name -> its catalogue entry (path, summary, provides)."""
    text = _catalogue_text()
    return tomllib.loads(text).get("distributions", {}) if text else {}


def provider_of(kind: str, name: str) -> str | None:
    """The first-party distribution that provides ``kind:name``, if any."""
    wanted = f"{kind}:{name}"
    for distribution, entry in catalogue().items():
        if wanted in entry.get("provides", ()):
            return distribution
    return None
