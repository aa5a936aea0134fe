"""The runner's semantics: what is checked, what is not applicable, what a result carries."""

from __future__ import annotations

import json
import subprocess
import sys

import attrs

from blockspec.spec.kinds import PROMISE_MEANINGS, PROMISES
from blockspec.testing import PROPERTIES, check, properties_for, select
from blockspec.testing.properties import find


def test_every_promise_has_a_meaning_and_a_property_that_checks_it():
    assert set(PROMISE_MEANINGS) == {(kind, p) for kind, promises in PROMISES.items() for p in promises}
    checked = {(kind, p.promise) for p in PROPERTIES if p.promise for kind in ([p.kind] if p.kind else PROMISES)}
    implied = {("positional", "additive"), ("positional", "rotary"), ("positional", "score_bias"),
               ("positional", "unbounded"), ("head", "lm"), ("head", "tied"), ("head", "tie_option"),
               ("head", "classifier")}
    # the contract and context_limit checks read these; tied and tie_option share the tied property's `when` rule
    assert set(PROMISE_MEANINGS) - checked <= implied


def test_an_undeclared_promise_is_not_applicable_not_passed(registry):
    learned = registry.get("positional", "learned")
    result = check(learned, find("relative", "positional"), max_examples=2)
    assert result.status == "not applicable"
    assert "does not promise 'relative'" in result.message


def test_the_tied_check_follows_the_lm_heads_promised_tie_option(registry):
    lm = registry.get("head", "lm")
    assert find("tied", "head").applies(lm)
    assert check(lm, find("tied", "head"), max_examples=10).status == "passed"


def test_select_by_distribution_and_component(registry):
    norms = select(registry, distribution="blockspec-norms")
    assert {c.name for c in norms} == {"layernorm", "rmsnorm"}
    assert [c.name for c in select(registry, component="head:lm")] == ["lm"]


def test_results_are_json_ready(registry):
    result = check(registry.get("norm", "layernorm"), find("contract", "norm"), max_examples=2)
    record = result.as_dict()
    assert json.loads(json.dumps(record))["status"] == "passed"


def test_every_kind_gets_the_universal_checks():
    for kind in PROMISES:
        names = {p.name for p in properties_for(kind)}
        assert {"contract", "finite", "deterministic", "state_dict", "model_shapes", "model_parameters"} <= names


def test_the_runner_restores_the_thread_count(registry):
    import torch

    before = torch.get_num_threads()
    check(registry.get("norm", "rmsnorm"), find("contract", "norm"), max_examples=2)
    assert torch.get_num_threads() == before


def test_import_blockspec_does_not_import_hypothesis_or_the_kit():
    code = ("import sys, blockspec, blockspec.testing, blockspec.testing.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m.startswith(('hypothesis', 'torch')) and '.' not in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_case_prints_every_knob(registry):
    from hypothesis import given, settings

    from blockspec.testing.strategies import cases

    @settings(max_examples=3)
    @given(cases(registry.get("head", "classifier")))
    def show(case):
        text = str(case)
        assert f"d_model={case.model.d_model}" in text and "config=ClassifierConfig(" in text
        assert attrs.has(type(case.config))
        assert all(f"{f.alias}=" in text for f in attrs.fields(type(case.model)))  # head_dim, embedding_scale

    show()
