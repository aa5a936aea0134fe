"""Each deliberately broken component is caught, with component, distribution and property named."""

from __future__ import annotations

import json

import attrs
import pytest

from blockspec.cli import main, verify_cmd
from blockspec.testing import PropertyFailure, check, properties_for
from blockspec.testing.properties import find

MAX_EXAMPLES = 10

CAUGHT = [  # component, the property that must fail, a property that holds and must still pass
    ("norm:centre_only", "scale_invariant", "shift_invariant"),
    ("positional:squared_rope", "relative", "rotation_norms"),
    ("activation:widening", "contract", "finite"),
    ("head:leaky", "positionwise", "contract"),
    ("head:leaky", "model_causal", "model_shapes"),
]


def _component(registry, qualified: str):
    kind, name = qualified.split(":")
    return registry.get(kind, name, "broken-dist")


@pytest.mark.parametrize(("qualified", "broken", "kept"), CAUGHT)
def test_the_broken_promise_fails_and_names_component_distribution_and_property(
        broken_registry, qualified, broken, kept):
    component = _component(broken_registry, qualified)
    result = check(component, find(broken, component.kind), max_examples=MAX_EXAMPLES)
    assert result.status == "failed"
    assert qualified in result.message
    assert "broken-dist" in result.message
    assert broken in result.message
    assert result.example is not None  # hypothesis' shrunk falsifying example
    assert check(component, find(kept, component.kind), max_examples=MAX_EXAMPLES).status == "passed"


def test_the_property_function_itself_raises_a_named_failure(broken_registry):
    component = _component(broken_registry, "norm:centre_only")
    result = check(component, find("scale_invariant", "norm"), max_examples=MAX_EXAMPLES)
    with pytest.raises(PropertyFailure, match=r"norm:centre_only \(from broken-dist 0.0\) fails scale_invariant"):
        find("scale_invariant", "norm")(component, result.example)


def test_the_shrunk_example_is_small(broken_registry):
    component = _component(broken_registry, "head:leaky")
    result = check(component, find("positionwise", "head"), max_examples=MAX_EXAMPLES)
    assert result.example.tokens == 2 and result.example.cut == 0 and result.example.batch == 1


def test_blockspec_verify_exits_1_and_prints_each_failure(broken_registry, monkeypatch, capsys):
    monkeypatch.setattr(verify_cmd, "registry_with_warnings", lambda: broken_registry)
    code = main(["verify", "--distribution", "broken-dist", "--max-examples", "3"])
    out = capsys.readouterr().out
    assert code == 1
    for qualified, prop in [("norm:centre_only", "scale_invariant"), ("positional:squared_rope", "relative"),
                            ("activation:widening", "contract"), ("head:leaky", "positionwise")]:
        assert f"FAIL {qualified} (from broken-dist 0.0) fails {prop}:" in out
    assert "falsifying example:" in out


def test_blockspec_verify_json_reports_the_failure(broken_registry, monkeypatch, capsys):
    monkeypatch.setattr(verify_cmd, "registry_with_warnings", lambda: broken_registry)
    code = main(["verify", "--component", "norm:centre_only", "--max-examples", "5", "--json"])
    records = json.loads(capsys.readouterr().out)
    assert code == 1
    failed = [r for r in records if r["status"] == "failed"]
    assert [r["property"] for r in failed] == ["scale_invariant"]
    assert failed[0]["distribution"] == "broken-dist"
    assert failed[0]["example"]["model"]["d_model"] >= 2
    assert {r["property"] for r in records} == {p.name for p in properties_for("norm")}


FALSE_PROMISES = [  # a first-party component made to claim what it does not do
    ("positional", "learned", "relative", "relative"),
    ("positional", "learned", "unbounded", "context_limit"),
    ("norm", "rmsnorm", "shift_invariant", "shift_invariant"),
    ("norm", "rmsnorm", "standardizes", "standardizes"),
    ("activation", "swiglu", "elementwise", "elementwise"),
    ("head", "classifier", "lm", "contract"),
]


@pytest.mark.parametrize(("kind", "name", "promise", "prop"), FALSE_PROMISES)
def test_a_promise_the_component_does_not_keep_is_caught(registry, kind, name, promise, prop):
    honest = registry.get(kind, name)
    boastful = attrs.evolve(honest, promises=honest.promises | {promise})
    result = check(boastful, find(prop, kind), max_examples=MAX_EXAMPLES)
    assert result.status == "failed"
    assert f"{kind}:{name} (from {honest.distribution}" in result.message
