"""Shared fixtures and hypothesis profiles.

Profiles (HYPOTHESIS_PROFILE=...): "dev" (default, fast), "ci" (what .ci/run uses),
"thorough" (opt-in, nightly: many more examples).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import blockspec

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "examples" / "specs"


def _provide_distribution(name: str, folder: str, entry: str) -> None:
    """Make a first-party distribution discoverable when this environment predates it (not pip-installed yet).

    The suite needs its components wherever a registry is loaded, subprocesses included: a
    ``.dist-info`` with its entry point ``entry`` (``name = package`` in group blockspec), as pip
    would write it, and ``plugins/<folder>`` on sys.path and PYTHONPATH. A no-op where
    ``pip install -r requirements-dev.txt`` installed it.
    """
    try:
        importlib.metadata.distribution(name)
        return
    except importlib.metadata.PackageNotFoundError:
        pass
    root = Path(tempfile.mkdtemp(prefix=f"{name}-dist-"))
    info = root / f"{name.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[blockspec]\n{entry}\n", encoding="utf-8")
    paths = [str(root), str(ROOT / "plugins" / folder)]
    sys.path[:0] = paths
    os.environ["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [os.environ.get("PYTHONPATH")])])
    importlib.invalidate_caches()


# Every spec's [block] defaults to one of blockspec-blocks' blocks; blockspec-moe provides ffn:moe.
_provide_distribution("blockspec-blocks", "blocks", "blocks = blockspec_blocks")
_provide_distribution("blockspec-moe", "moe", "moe = blockspec_moe")

settings.register_profile("dev", max_examples=20, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
# CI is derandomized (examples derived from each test's source), so the run that gates a merge
# gives the result the developer saw; dev runs draw new examples every time and keep exploring.
settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(scope="session")
def registry() -> blockspec.Registry:
    """The installed plugins, loaded once (blockspec-blocks and blockspec-moe among them: see above)."""
    return blockspec.load_registry()


@pytest.fixture
def example_spec(registry):
    """Load an example spec by its stem: example_spec("gpt2-small")."""

    def load(stem: str) -> blockspec.ModelSpec:
        return blockspec.load_spec(SPECS / f"{stem}.toml", registry)

    return load


@pytest.fixture(scope="module")
def one_thread():
    """Micro models run fastest on one intra-op thread; a second only adds contention on 2 cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def keep_threads():
    """A command may set torch's thread count (train, --threads); the next test gets it back."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
