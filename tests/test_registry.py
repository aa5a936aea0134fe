"""The plugin registry: each registration checked on arrival, bad plugins quarantined whole."""

from __future__ import annotations

import tomllib
import types
import warnings

import pytest
from attrs import define, frozen

import blockspec
from blockspec import PluginError, RegistrationError
from blockspec.spec.kinds import KINDS
from blockspec.registry.loading import PluginQuarantinedWarning, load_registry
from blockspec.registry.components import Component, validate_component

from .conftest import ROOT


@frozen
class EmptyConfig:
    """A config with no fields."""


@define
class MutableConfig:
    pass


def plugin(register_body) -> types.SimpleNamespace:
    """A plugin object whose hook runs ``register_body(register)``."""

    @blockspec.hookimpl
    def blockspec_register(register):
        register_body(register)

    return types.SimpleNamespace(blockspec_register=blockspec_register)


def build_nothing(config, ctx):
    raise AssertionError("never built in these tests")


def quarantined(*plugins) -> blockspec.Registry:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        registry = load_registry(entry_points=False, plugins=plugins)
    assert len(caught) == len(registry.quarantined)
    return registry


def test_installed_plugins_register_exactly_the_catalogue(registry):
    catalogue = tomllib.loads((ROOT / "registry.toml").read_text())["distributions"]
    first_party = {f"{c.kind}:{c.name}": c.distribution for c in registry if c.distribution in catalogue}
    listed = {entry: dist for dist, spec in catalogue.items() for entry in spec["provides"]}
    assert first_party == listed
    assert all((ROOT / spec["path"] / "pyproject.toml").is_file() for spec in catalogue.values())


def test_every_component_records_its_provider(registry):
    assert {c.kind for c in registry} == set(KINDS)
    for component in registry:
        assert component.version and component.distribution and component.summary
    assert registry.get("attention", "causal").distribution == "blockspec"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("widget", "x", EmptyConfig), "unknown kind 'widget'"),
        (("norm", "bad name", EmptyConfig), "plain identifier"),
        (("norm", "x", MutableConfig), "frozen attrs class"),
        (("norm", "x", dict), "frozen attrs class"),
        (("norm", "x", EmptyConfig, "not callable"), "build must be callable"),
    ],
)
def test_registration_is_checked(args, words):
    kind, name, config_cls, *rest = args
    build = rest[0] if rest else build_nothing
    component = Component(kind=kind, name=name, config_cls=config_cls, build=build, distribution="d", version="1")
    with pytest.raises(RegistrationError, match=words):
        validate_component(component)


def test_unknown_promise_is_refused():
    component = Component(kind="norm", name="x", config_cls=EmptyConfig, build=build_nothing,
                          distribution="d", version="1", promises=frozenset({"causal"}))
    with pytest.raises(RegistrationError, match="a norm may promise"):
        validate_component(component)


def test_promises_given_as_a_string_says_a_tuple_is_needed():
    def comma_forgotten(register):
        register("norm", "x", EmptyConfig, build_nothing, promises=("unit_rms"))

    registry = quarantined((plugin(comma_forgotten), "str-dist", "1"))
    assert registry.names("norm") == []
    (line,) = [str(q) for q in registry.quarantined]
    assert "\n" not in line
    assert "promises must be a tuple of names, found the string 'unit_rms'" in line and "promises=('unit_rms',)" in line
    assert "unknown promises" not in line


def test_a_plugin_lands_whole_or_not_at_all():
    def half_then_bad(register):
        register("norm", "fine", EmptyConfig, build_nothing)
        register("norm", "broken", MutableConfig, build_nothing)

    registry = quarantined((plugin(half_then_bad), "half-dist", "1.0"))
    assert registry.names("norm") == []  # "fine" did not land either
    (entry,) = registry.quarantined
    assert entry.distribution == "half-dist" and entry.version == "1.0"
    assert "frozen attrs class" in entry.cause
    assert len(registry) == 4  # only the built-ins: causal attention, dense ffn, pre and post blocks


def test_a_raising_plugin_does_not_stop_the_others():
    def good(register):
        register("norm", "good", EmptyConfig, build_nothing)

    def explode(register):
        raise SystemExit(3)

    registry = quarantined((plugin(explode), "bad-dist", "0.1"), (plugin(good), "good-dist", "0.2"))
    assert registry.names("norm") == ["good"]
    assert [str(q) for q in registry.quarantined] == ["plugin bad-dist 0.1 quarantined: SystemExit: 3"]


def test_duplicate_within_one_distribution_is_refused():
    def twice(register):
        register("norm", "same", EmptyConfig, build_nothing)
        register("norm", "same", EmptyConfig, build_nothing)

    registry = quarantined((plugin(twice), "dup-dist", "1"))
    assert "registered twice by dup-dist" in registry.quarantined[0].cause


def test_same_name_from_two_distributions_needs_a_pin():
    def one(register):
        register("norm", "layernorm", EmptyConfig, build_nothing)

    registry = load_registry(entry_points=False, plugins=[(plugin(one), "a-dist", "1"), (plugin(one), "b-dist", "1")])
    assert len(registry.providers("norm", "layernorm")) == 2
    assert registry.get("norm", "layernorm") is None
    assert registry.get("norm", "layernorm", "b-dist").distribution == "b-dist"


def test_incompatible_api_is_quarantined():
    def fine(register):
        register("norm", "x", EmptyConfig, build_nothing)

    old = plugin(fine)
    old.BLOCKSPEC_API = 0
    registry = quarantined((old, "old-dist", "1"))
    assert "declares core API 0" in registry.quarantined[0].cause


def test_misspelled_hook_is_quarantined():
    @blockspec.hookimpl
    def blockspec_regsiter(register):
        raise AssertionError("never called")

    registry = quarantined((types.SimpleNamespace(blockspec_regsiter=blockspec_regsiter), "typo-dist", "1"))
    assert "blockspec_regsiter" in registry.quarantined[0].cause


def test_strict_mode_turns_quarantine_into_failure():
    def explode(register):
        raise RuntimeError("boom")

    with pytest.raises(PluginError, match="plugin bad-dist 1 quarantined: RuntimeError: boom"):
        load_registry(entry_points=False, plugins=[(plugin(explode), "bad-dist", "1")], strict=True)


def test_warning_category_names_the_distribution():
    def explode(register):
        raise RuntimeError("boom")

    with pytest.warns(PluginQuarantinedWarning, match="bad-dist"):
        load_registry(entry_points=False, plugins=[(plugin(explode), "bad-dist", "1")])
