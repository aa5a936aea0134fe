"""`blockspec verify`: the table, exit codes, and usage errors as one line with exit 2."""

from __future__ import annotations

import builtins
import json

import pytest

from blockspec.cli import main

from ..plugin_dists import FAULTS, InstalledDists, write_distribution


def test_a_passing_component_prints_its_row_and_exits_0(capsys):
    code = main(["verify", "--component", "norm:rmsnorm", "--max-examples", "3"])
    out = capsys.readouterr().out
    assert code == 0
    header = next(line for line in out.splitlines() if line.startswith("COMPONENT"))
    assert "scale_invariant" in header and "unit_rms" in header
    row = next(line for line in out.splitlines() if line.startswith("norm:rmsnorm"))
    assert "blockspec-norms" in row and "FAIL" not in row
    assert "0 failed" in out


def test_json_lists_every_cell(capsys):
    assert main(["verify", "--component", "activation:swiglu", "--max-examples", "2", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    status = {r["property"]: r["status"] for r in records}
    assert status["gated"] == "passed"
    assert status["elementwise"] == "not applicable"
    assert all(r["distribution"] == "blockspec-activations" for r in records)


@pytest.mark.parametrize(("argv", "message"), [
    (["--component", "norm:rms_norm"], "no norm named 'rms_norm' is registered; did you mean norm:rmsnorm?"),
    (["--component", "rmsnorm"], "--component: expected KIND:NAME"),
    (["--distribution", "blockspec-nope"], "no registered component comes from 'blockspec-nope'"),
])
def test_a_selection_that_matches_nothing_is_a_usage_error(argv, message, capsys):
    assert main(["verify", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("blockspec: error: ") and message in err
    assert "Traceback" not in err


def test_max_examples_must_be_positive(capsys):
    assert main(["verify", "--max-examples", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("blockspec: error: --max-examples: expected a positive integer, found '0'")


def test_without_hypothesis_verify_says_what_to_install(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_hypothesis(name, *args, **kwargs):
        if name == "hypothesis" or name.startswith("hypothesis."):
            raise ImportError("No module named 'hypothesis'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_hypothesis)
    assert main(["verify"]) == 2
    assert "pip install 'blockspec[testing]'" in capsys.readouterr().err


@pytest.fixture
def no_policy_env(monkeypatch):
    for name in ("BLOCKSPEC_PLUGINS", "BLOCKSPEC_REGISTRY", "BLOCKSPEC_STRICT_PLUGINS"):
        monkeypatch.delenv(name, raising=False)


def test_a_quarantined_distribution_is_named_with_its_cause(tmp_path, capsys, no_policy_env):
    write_distribution(tmp_path, "zzz-broken-norms", "0.3.0", "broken_norms_for_verify", FAULTS["runtime_error"][0])
    with InstalledDists(tmp_path):
        code = main(["verify", "--distribution", "zzz-broken-norms"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    line = next(line for line in err.splitlines() if line.startswith("blockspec: error: --distribution"))
    assert "zzz-broken-norms" in line and "quarantined" in line and "RuntimeError: boom at import" in line
    assert "no registered component comes from" not in line


def test_a_distribution_the_load_policy_left_out_says_so(capsys, no_policy_env, monkeypatch):
    monkeypatch.setenv("BLOCKSPEC_PLUGINS", "blockspec-norms")
    assert main(["verify", "--distribution", "blockspec-heads"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("blockspec: error: --distribution: ")
    assert "blockspec-heads" in err and "not loaded: not in BLOCKSPEC_PLUGINS" in err
    assert "no registered component comes from" not in err
