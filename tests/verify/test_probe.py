"""The load-time probe is the kit's ``contract`` property on one fixed case, and needs no hypothesis."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from attrs import frozen

from blockspec.registry.components import Component
from blockspec.testing import PropertyFailure
from blockspec.testing.probe import ContractError, probe, probe_case
from blockspec.testing.properties import find

from .conftest import broken_module


@frozen(kw_only=True)
class NoFields:
    """No fields."""


def component(kind: str, build, promises=()) -> Component:
    return Component(kind=kind, name="probed", config_cls=NoFields, build=build, distribution="probe-test",
                     version="1", summary="", promises=frozenset(promises))


def test_a_breach_reads_as_the_kits_contract_failure_on_the_probe_case(broken_registry):
    widening = broken_registry.get("activation", "widening")
    with pytest.raises(PropertyFailure) as kit:
        find("contract", "activation")(widening, probe_case(widening.config_cls()))
    with pytest.raises(ContractError) as probed:
        probe(widening)
    assert str(probed.value) == kit.value.detail
    assert "expected shape (2, 5, 12)" in str(probed.value)


def test_the_probe_passes_what_the_kit_passes(registry):
    assert [probe(c) for c in registry if c.kind != "head" or c.name != "classifier"] == [None] * (len(registry) - 1)
    assert "needs values" in probe(registry.get("head", "classifier"))


def test_declining_the_sizes_is_no_breach_but_a_crash_or_a_non_module_is():
    def declines(config, ctx):
        raise ValueError("needs d_model >= 64")

    def not_a_module(config, ctx):
        return "a string"

    def crashes(config, ctx):
        from torch import nn

        class Crash(nn.Module):
            def forward(self, x):
                raise RuntimeError("kaboom")
        return Crash()

    assert probe(component("norm", declines)) == "it declined the probe sizes (needs d_model >= 64)"
    with pytest.raises(ContractError, match="build returned str, not an nn.Module"):
        probe(component("norm", not_a_module))
    with pytest.raises(ContractError, match="raised RuntimeError: kaboom"):
        probe(component("norm", crashes))


def test_a_positional_encoder_must_subclass_the_base_class():
    def plain(config, ctx):
        from torch import nn

        return nn.Identity()

    with pytest.raises(ContractError, match="Identity does not subclass PositionalEncoding"):
        probe(component("positional", plain))


def test_the_probe_and_the_properties_run_without_hypothesis():
    script = textwrap.dedent("""
        import sys
        sys.modules["hypothesis"] = None  # as if the testing extra were not installed
        import blockspec.testing
        from blockspec import load_registry
        from blockspec.testing import PROPERTIES, Case, Property
        registry = load_registry(probe=True)
        assert [line.split(" (")[0] for line in registry.unprobed] == ["head:classifier"], registry.unprobed
        assert registry.quarantined == (), registry.quarantined
        try:
            blockspec.testing.verify
        except ImportError as error:
            assert "pip install 'blockspec[testing]'" in str(error)
        else:
            raise AssertionError("verify needs hypothesis")
        print("ok", len(list(registry)))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok ")
