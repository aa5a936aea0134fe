"""Shared fixtures and hypothesis profiles.

Profiles (HYPOTHESIS_PROFILE=...): "dev" (default, fast), "ci" (what .ci/run uses),
"thorough" (opt-in, nightly: many more examples).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import blockspec

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "examples" / "specs"


settings.register_profile("dev", max_examples=20, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
# CI is derandomized (examples derived from each test's source), so the run that gates a merge
# gives the result the developer saw; dev runs draw new examples every time and keep exploring.
settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

SLOW_ENV = "BLOCKSPEC_SLOW"


def _share_the_cores() -> None:
    """Under pytest-xdist each worker takes its share of the cores: two workers of two threads each on two
    cores would spend the run switching between them."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


_share_the_cores()


def slow_opted_in(config: pytest.Config) -> bool:
    """Slow checks run with `-m slow` or BLOCKSPEC_SLOW=1; the default run stays inside CI's budget."""
    return "slow" in (config.option.markexpr or "") or os.environ.get(SLOW_ENV, "") not in ("", "0")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The one place a `slow` mark becomes a skip, with the mark's reason when it gives one."""
    if slow_opted_in(config):
        return
    for item in items:
        mark = item.get_closest_marker("slow")
        if mark is not None:
            why = mark.args[0] if mark.args else "a long check"
            item.add_marker(pytest.mark.skip(reason=f"slow: {why} (run with -m slow or {SLOW_ENV}=1)"))


@pytest.fixture(scope="session")
def registry() -> blockspec.Registry:
    """The installed plugins (requirements-dev.txt installs every first-party one), loaded once."""
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


@pytest.fixture(scope="session")
def sources(tmp_path_factory, registry):
    """The harness tests' checkpoints and tasks (harness_tasks.write_sources), built once for both modules."""
    from .harness_tasks import write_sources

    return write_sources(tmp_path_factory.mktemp("harness"), registry)


@pytest.fixture(scope="session")
def room(tmp_path_factory, registry):
    """Every kind of model source (source_room.write_room), built once for test_source_room and test_api_export."""
    pytest.importorskip("tokenizers")
    from .source_room import write_room

    return write_room(tmp_path_factory.mktemp("sources"), registry)


@pytest.fixture(scope="session")
def assets(tmp_path_factory):
    """cli_assets' micro spec, play, two one-step checkpoints and an export, made once for the CLI tests that read
    them (a module that writes near them, or fuzzes its paths, makes its own)."""
    from .cli_assets import make_assets

    return make_assets(tmp_path_factory.mktemp("assets"))


@pytest.fixture
def inputs(tmp_path):
    """A micro character-level spec and a short play: what the sweep and lock tests train on."""
    from .corpus import small_play
    from .specs import spec_text

    spec, data = tmp_path / "tiny.toml", tmp_path / "play.txt"
    spec.write_text(spec_text(name="tiny", vocab_size=65, context_length=16, d_model=16, n_layers=1, n_heads=2,
                              d_ff=32))
    data.write_text(small_play(200))
    return spec, data
