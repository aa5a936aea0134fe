"""`blockspec verify`: the table, exit codes, and usage errors as one line with exit 2."""

from __future__ import annotations

import builtins
import json

import pytest

from blockspec.cli import main


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
