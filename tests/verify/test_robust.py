"""The kit's robustness (issue 15, items 2-6): trained parameters, dtypes, elementwise locality, leak margins and
far positions at the default budget, and no false positive (a learned activation parameter, xPos, a check that
cannot run). Components live in tests/verify/robust/, registered as plugin modules like tests/verify/broken/.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import attrs
import pytest
import torch
from torch import nn

import blockspec
from blockspec.cli import main, verify_cmd
from blockspec.errors import RegistrationError
from blockspec.registry.components import Component, validate_component
from blockspec.spec.kinds import PROMISES
from blockspec.testing import check, properties_for
from blockspec.testing import pytest_plugin, runner
from blockspec.testing.formulas import model_parameters
from blockspec.testing.harness import perturb, trained_state
from blockspec.spec.schema import ModelConfig
from blockspec.testing.properties import Property, find

from .robust import DISTRIBUTION, VERSION, broken, unusual


@pytest.fixture(scope="module")
def robust_registry() -> blockspec.Registry:
    return blockspec.load_registry(plugins=[(broken, DISTRIBUTION, VERSION), (unusual, DISTRIBUTION, VERSION)])


def _get(registry, qualified: str) -> Component:
    kind, name = qualified.split(":")
    return registry.get(kind, name, DISTRIBUTION)


# Each broken component fails the named property at the default budget (max_examples=None: 25).
CAUGHT = [
    ("norm:gain_first", "shift_invariant"),  # 2: only once the gains differ
    ("positional:zero_table_absolute", "relative"),  # 2: only once the table is not all zeros
    ("norm:upcast", "dtypes"),  # 3: bfloat16/float16 in, float32 out
    ("norm:sticky_float32", "dtypes"),  # 3: the weight leaves the dtype .to() gave it
    ("positional:half_position_rope", "dtypes"),  # 3: bfloat16 positions, far from the float64 result
    ("activation:softmax_gate", "elementwise"),  # 4: symmetric feature mixing
    ("activation:token_norm_gelu", "elementwise"),  # 4: a per-token normalisation inside
    ("activation:weak_leak_swiglu", "model_causal"),  # 5: a 1e-5 leak through the whole model
    ("head:weak_leak", "positionwise"),  # 5: a 1e-5 leak in the head
    ("head:weak_leak", "model_causal"),
    ("positional:clamped_alibi_64", "relative"),  # 5: positions clamped at 64
    ("positional:clamped_alibi_32", "relative"),
]


@pytest.mark.parametrize(("qualified", "prop"), CAUGHT)
def test_a_robust_check_catches_the_broken_component_at_the_default_budget(robust_registry, qualified, prop):
    component = _get(robust_registry, qualified)
    result = check(component, find(prop, component.kind))
    assert result.status == "failed", result.message
    assert f"{qualified} (from {DISTRIBUTION} {VERSION}) fails {prop}:" in result.message


@pytest.mark.parametrize(("qualified", "prop"), [("norm:gain_first", "shift_invariant"),
                                                 ("positional:zero_table_absolute", "relative")])
def test_the_bug_hides_in_fresh_modules_and_shows_in_trained_ones(robust_registry, qualified, prop):
    component = _get(robust_registry, qualified)
    fresh_only = attrs.evolve(find(prop, component.kind), weights="fresh")
    assert check(component, fresh_only).status == "passed"
    result = check(component, attrs.evolve(fresh_only, weights="trained"))
    assert result.status == "failed" and result.example.trained


def test_the_upcast_shows_only_in_half_precision(robust_registry):
    component = _get(robust_registry, "norm:upcast")
    assert check(component, find("contract", "norm")).status == "passed"  # float32 and float64 only
    result = check(component, find("dtypes", "norm"))
    assert "output for bfloat16 input: expected dtype torch.bfloat16, found torch.float32" in result.message


def test_a_weight_that_leaves_its_dtype_is_named(robust_registry):
    result = check(_get(robust_registry, "norm:sticky_float32"), find("dtypes", "norm"))
    assert "these stay in another dtype: weight (torch.float32)" in result.message


def test_elementwise_names_the_feature_that_leaked(robust_registry):
    result = check(_get(robust_registry, "activation:softmax_gate"), find("elementwise", "activation"))
    assert "changing input feature" in result.message and "changed output feature" in result.message


UNUSUAL = ["activation:learned_swish", "activation:per_feature_swish", "positional:xpos",
           "positional:zero_table_bias"]


@pytest.mark.parametrize("qualified", UNUSUAL)
def test_a_correct_unusual_component_passes_every_property(robust_registry, qualified):
    component = _get(robust_registry, qualified)
    results = [check(component, prop) for prop in properties_for(component.kind)]
    assert [r.message for r in results if r.status not in ("passed", "not applicable")] == []


def test_the_closed_form_counts_the_activations_own_parameters(robust_registry):
    result = check(_get(robust_registry, "activation:learned_swish"), find("model_parameters", "activation"))
    assert result.status == "passed", result.message
    model = ModelConfig(name="m", vocab_size=11, context_length=8, d_model=8, n_layers=3, n_heads=2, d_ff=12)
    base = dict(positional=0, norm=0, attention=0, head=0, gated=False)
    assert model_parameters(model, activation=1, **base) == model_parameters(model, **base) + 3


def test_rotary_and_norm_preserving_are_separate_promises(registry, robust_registry):
    assert {"rotary", "norm_preserving"} <= PROMISES["positional"]
    assert find("rotation_norms", "positional").promise == "norm_preserving"
    assert {"rotary", "norm_preserving"} <= registry.get("positional", "rope").promises
    xpos = _get(robust_registry, "positional:xpos")
    undeclared = check(xpos, find("rotation_norms", "positional"))
    assert undeclared.status == "not applicable"
    assert "'rotary' alone does not imply it; declare 'norm_preserving' if it holds" in undeclared.message
    boastful = attrs.evolve(xpos, promises=xpos.promises | {"norm_preserving"})
    assert check(boastful, find("rotation_norms", "positional")).status == "failed"


def test_norm_preserving_without_rotary_is_refused_with_the_fix(robust_registry):
    xpos = _get(robust_registry, "positional:xpos")
    with pytest.raises(RegistrationError, match=r"promise 'norm_preserving' needs 'rotary' as well; "
                                                r"write promises=\('rotary', 'norm_preserving', \.\.\.\)"):
        validate_component(attrs.evolve(xpos, promises=frozenset({"norm_preserving", "relative"})))


def test_a_check_that_cannot_run_is_could_not_check_not_not_promised(robust_registry):
    result = check(_get(robust_registry, "attention:plain_causal"), find("weights", "attention"), max_examples=3)
    assert result.status == "could not check" and result.passed
    assert result.message == (f"attention:plain_causal (from {DISTRIBUTION} {VERSION}) could not check weights: "
                              "the module exposes no project()/weights() to read attention weights from")


def _only_weights(monkeypatch, robust_registry):
    monkeypatch.setattr(verify_cmd, "registry_with_warnings", lambda: robust_registry)
    real = runner.verify
    monkeypatch.setattr(runner, "verify", lambda components, **kw: real(components, only=["weights"], **kw))


def test_the_cli_shows_could_not_check_and_exits_0(robust_registry, monkeypatch, capsys):
    _only_weights(monkeypatch, robust_registry)
    assert main(["verify", "--component", "attention:plain_causal", "--max-examples", "2"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("attention:plain_causal"))
    assert row.split()[-1] == "n/c"
    assert "\nn/c attention:plain_causal (from robust-dist 0.0) could not check weights: " in out
    assert "0 passed, 0 failed, 1 could not check (n/c), 0 not applicable (not promised)" in out


def test_json_says_could_not_check(robust_registry, monkeypatch, capsys):
    _only_weights(monkeypatch, robust_registry)
    assert main(["verify", "--component", "attention:plain_causal", "--max-examples", "2", "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)
    assert record["status"] == "could not check" and "project()" in record["message"]


def _counting(kind: str, calls: list) -> Property:
    return Property(name="count", summary="counts examples", kind=kind,
                    check=lambda component, case, device: calls.append(case))


def test_check_runs_the_kits_budget_whatever_the_hypothesis_profile(registry):
    from hypothesis import settings

    calls: list = []
    before = settings._current_profile
    settings.register_profile("robust-100", max_examples=100)
    settings.load_profile("robust-100")  # a plugin suite's profile must not decide the verdict
    try:
        check(registry.get("norm", "rmsnorm"), _counting("norm", calls))
    finally:
        settings.load_profile(before)
    assert len(calls) == runner.DEFAULT_MAX_EXAMPLES == 25


@pytest.mark.parametrize(("argv", "expected"), [([], 25), (["--thorough"], 500), (["--max-examples", "7"], 7)])
def test_the_cli_budget(argv, expected, monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(runner, "verify", lambda components, **kw: seen.append(kw["max_examples"]) or [])
    assert main(["verify", "--component", "norm:rmsnorm", *argv]) == 0
    assert seen == [expected]


def test_thorough_and_max_examples_exclude_each_other(capsys):
    assert main(["verify", "--thorough", "--max-examples", "3"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(("options", "expected"), [({}, 25), ({"blockspec_thorough": True}, 500),
                                                   ({"blockspec_max_examples": 9}, 9)])
def test_the_pytest_line_has_the_same_budget(registry, options, expected, monkeypatch):
    seen = []
    monkeypatch.setattr(runner, "check", lambda c, p, *, max_examples, device: seen.append(max_examples)
                        or SimpleNamespace(status="passed"))
    config = SimpleNamespace(getoption=lambda name, default=None: options.get(name, default))
    pytest_plugin._run_one(registry.get("norm", "rmsnorm"), find("contract", "norm"),
                           SimpleNamespace(config=config), None)
    assert seen == [expected]


def test_starts_are_drawn_far_past_the_context():
    from hypothesis import find as find_example

    from blockspec.testing.strategies import starts

    assert find_example(starts(16), lambda start: start > 1000) > 1000
    assert find_example(starts(2), lambda start: start in (63, 64, 65)) in (63, 64, 65)


class _Tables(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(4))
        self.table = nn.Parameter(torch.zeros(3))
        self.register_buffer("saved", torch.zeros(2))
        self.register_buffer("derived", torch.arange(5.0), persistent=False)
        self.register_buffer("ids", torch.arange(3))


def test_perturb_moves_every_trained_tensor_and_is_seeded():
    first, second, fresh = _Tables(), _Tables(), _Tables()
    perturb(first, 7)
    perturb(second, 7)
    assert set(trained_state(first)) == {"gain", "table", "saved"}
    for name, tensor in trained_state(first).items():
        assert torch.equal(tensor, trained_state(second)[name])
        assert not torch.equal(tensor, trained_state(fresh)[name])  # zeros and equal gains move too
    assert first.gain.unique().numel() == 4
    assert torch.equal(first.derived, fresh.derived) and torch.equal(first.ids, fresh.ids)
