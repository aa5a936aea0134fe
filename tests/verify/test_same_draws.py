"""One verdict everywhere (issue 27, item 6): the kit draws the same cases for a plugin whether its module is local
(editable install, PYTHONPATH) or in site-packages (a wheel), though hypothesis mixes local modules' constants
into its draws."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import blockspec
from blockspec.plugin import hookimpl
from blockspec.testing import check
from blockspec.testing.properties import Property
from blockspec.testing.same_draws import HOOK, without_local_constants

PLUGIN = '''
from attrs import frozen

# Literal constants hypothesis would mix into the draws of a local module: seeds, factors, sizes.
CONSTANTS = (4242, 31337, 12345, 2, 3, 5, 7, 11, 13, 1000, 0.777, 77.7, 2.5, 1.25, 3.5, 99.0)


@frozen(kw_only=True)
class Config:
    """A norm with two options."""

    width: int = 3
    scale: float = 1.5


def build(config, ctx):
    import torch

    return torch.nn.LayerNorm(ctx.model.d_model)
'''


def _import(path: Path, name: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PLUGIN)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # where hypothesis looks for local modules
    spec.loader.exec_module(module)
    return module


def _drawn(module, distribution: str) -> list[str]:
    """Every case the kit's runner draws for one property of the module's norm, as text."""
    @hookimpl
    def blockspec_register(register) -> None:
        register("norm", "constants", module.Config, module.build)

    plugin = SimpleNamespace(blockspec_register=blockspec_register)
    registry = blockspec.load_registry(plugins=[(plugin, distribution, "0")], entry_points=False, probe=False)
    seen: list[str] = []
    record = Property(name="record", kind="norm", summary="records its cases",
                      check=lambda _component, case, _device: seen.append(str(case)))
    assert check(registry.get("norm", "constants", distribution), record, max_examples=60).status == "passed"
    return seen


def test_the_same_plugin_gets_the_same_draws_from_site_packages_and_from_a_local_path(tmp_path):
    wheel = _import(tmp_path / "venv" / "lib" / "site-packages" / "wheel_norms.py", "wheel_norms")
    from_wheel = _drawn(wheel, "wheel-norms")
    local = _import(tmp_path / "src" / "local_norms.py", "local_norms")
    from_source = _drawn(local, "local-norms")
    try:
        assert len(from_wheel) == 60 and from_source == from_wheel
    finally:
        del sys.modules["wheel_norms"], sys.modules["local_norms"]


def test_the_hook_the_kit_patches_is_the_one_hypothesis_calls():
    from hypothesis.internal.conjecture import providers

    assert callable(getattr(providers, HOOK, None)), f"hypothesis no longer has {HOOK}: see same_draws.py"
    with without_local_constants():
        constants = providers.HypothesisProvider(None)._local_constants
        assert len(constants) == 0 and not constants.set_for_type("integer")
    assert getattr(providers, HOOK).__name__ == HOOK  # restored
