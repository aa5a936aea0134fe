"""Fixtures for the conformance-kit tests; ``slow`` tests run only on request."""

from __future__ import annotations

import importlib
import os

import pytest

import blockspec

SLOW_ENV = "BLOCKSPEC_SLOW"
BROKEN = ("bad_norm", "bad_rotary", "bad_activation", "leaky_head")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``slow`` tests unless ``-m`` mentions slow or BLOCKSPEC_SLOW=1."""
    if "slow" in (config.option.markexpr or "") or os.environ.get(SLOW_ENV, "") not in ("", "0"):
        return
    skip = pytest.mark.skip(reason=f"slow: run with -m slow or {SLOW_ENV}=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def broken_module(name: str):
    return importlib.import_module(f"tests.verify.broken.{name}")


@pytest.fixture(scope="session")
def broken_registry() -> blockspec.Registry:
    """The installed plugins plus every deliberately broken fixture, as distribution broken-dist."""
    from tests.verify.broken import DISTRIBUTION, VERSION

    plugins = [(broken_module(name), DISTRIBUTION, VERSION) for name in BROKEN]
    return blockspec.load_registry(plugins=plugins)
