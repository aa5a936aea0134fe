"""pytest plugin (entry point ``pytest11``): run the conformance kit inside a plugin's own test suite.

One line in a test module::

    from blockspec.testing import verify_distribution
    test_conformance = verify_distribution("my-distribution")

gives one test per component x declared property. Options: ``--blockspec-max-examples N``
(default: the kit's own 25, as ``blockspec verify``, whatever the hypothesis profile), ``--blockspec-thorough``
(the release budget, as ``blockspec verify --thorough``) and ``--blockspec-device``.
Only pytest is imported here at start-up, so the plugin costs nothing to suites that do not use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("blockspec", "blockspec conformance kit")
    group.addoption("--blockspec-max-examples", type=int, default=None, metavar="N",
                    help="hypothesis examples per component x property (default: 25, as blockspec verify)")
    group.addoption("--blockspec-thorough", action="store_true", default=False,
                    help="the release budget (500 examples), as blockspec verify --thorough")
    group.addoption("--blockspec-device", default="cpu", metavar="DEVICE",
                    help="device to build components on (default: cpu)")


def verify_distribution(
    distribution: str,
    *,
    plugins: Iterable[tuple[ModuleType | object, str, str]] = (),
    entry_points: bool = True,
    max_examples: int | None = None,
):
    """A parametrized test function: every component of ``distribution`` x every property it declares.

    ``plugins`` adds uninstalled plugin objects as ``(module, distribution, version)``, as for
    ``blockspec.load_registry``.
    """
    from blockspec.registry.loading import load_registry
    from blockspec.testing.properties import properties_for
    from blockspec.testing.runner import select

    registry = load_registry(plugins=plugins, entry_points=entry_points)
    components = select(registry, distribution=distribution)
    pairs = [(c, p) for c in components for p in properties_for(c.kind) if p.applies(c)]
    if not pairs:
        return _nothing_installed(distribution, registry)
    ids = [f"{c.kind}:{c.name}:{p.name}" for c, p in pairs]

    @pytest.mark.parametrize(("component", "prop"), pairs, ids=ids)
    def test_conformance(component, prop, request: pytest.FixtureRequest) -> None:
        _run_one(component, prop, request, max_examples)

    return test_conformance


def _run_one(component, prop, request: pytest.FixtureRequest, max_examples: int | None) -> None:
    from blockspec.testing.runner import budget, check

    options = request.config  # the defaults apply when the plugin itself is disabled (-p no:blockspec)
    examples = budget(max_examples or options.getoption("blockspec_max_examples", default=None),
                      thorough=options.getoption("blockspec_thorough", default=False))
    result = check(component, prop, max_examples=examples,
                   device=options.getoption("blockspec_device", default="cpu"))
    if result.status in ("not applicable", "could not check"):
        pytest.skip(result.message)
    if result.status == "failed":
        example = f"\nfalsifying example: {result.example}" if result.example else ""
        pytest.fail(result.message + example, pytrace=False)


def _nothing_installed(distribution: str, registry):
    installed = sorted({c.distribution for c in registry})

    def test_conformance() -> None:
        pytest.fail(f"no component of distribution {distribution!r} is registered; "
                    f"registered distributions: {', '.join(installed)}", pytrace=False)

    return test_conformance
