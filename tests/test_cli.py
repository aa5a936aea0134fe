"""The command line: list, check, show; errors as lines with exit 2, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import blockspec
from blockspec.registry.loading import load_registry

from .conftest import SPECS
from .test_spec import BASE
from .cli_run import run


def test_list_json_has_every_component_with_its_distribution(capsys):
    code, out, _ = run(capsys, "list", "--json")
    records = json.loads(out)
    assert code == 0
    pairs = {(r["kind"], r["name"]): r["distribution"] for r in records}
    expected = {
        ("positional", "learned"): "blockspec-positional", ("positional", "sinusoidal"): "blockspec-positional",
        ("positional", "rope"): "blockspec-positional", ("norm", "layernorm"): "blockspec-norms",
        ("norm", "rmsnorm"): "blockspec-norms", ("head", "lm"): "blockspec-heads",
        ("head", "classifier"): "blockspec-heads", ("attention", "causal"): "blockspec",
        **{("activation", a): "blockspec-activations" for a in ("relu", "gelu", "silu", "swiglu", "geglu")},
    }
    assert expected.items() <= pairs.items()
    assert all({"kind", "name", "distribution", "version", "summary"} <= r.keys() for r in records)


def test_list_filters_by_kind(capsys):
    code, out, _ = run(capsys, "list", "--kind", "norm")
    assert code == 0 and "layernorm" in out and "rope" not in out


def test_check_ok(capsys):
    code, out, err = run(capsys, "check", str(SPECS / "gpt2-small.toml"), str(SPECS / "llama-style.toml"))
    assert code == 0, err
    assert out.splitlines()[0].startswith("ok  ") and "124,439,808 parameters" in out


def test_check_reports_every_problem_one_line_each(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    text = BASE.replace("d_model = 64", 'd_model = "768"').replace("n_heads = 4", "n_haeds = 12")
    bad.write_text(text.replace('use = "layernorm"', 'use = "rmsnrom"'))
    good = SPECS / "tiny-shakespeare.toml"
    code, out, err = run(capsys, "check", str(bad), str(good))
    lines = err.splitlines()
    assert code == 2
    assert "ok  " in out  # the good file is still checked
    assert lines == [
        f"blockspec: error: {bad}:5: $.model.d_model: expected an integer, found str '768'",
        f"blockspec: error: {bad}:1: $.model.n_heads: missing required key",
        f"blockspec: error: {bad}:7: $.model.n_haeds: unknown key 'n_haeds'; did you mean 'n_heads'?",
        f"blockspec: error: {bad}:14: $.norm.use: unknown norm 'rmsnrom'; did you mean 'rmsnorm'? "
        "(provided by blockspec-norms)",
    ]


def test_show_json_reports_exact_and_estimated_parameters(capsys):
    code, out, _ = run(capsys, "show", str(SPECS / "gpt2-small.toml"), "--json")
    summary = json.loads(out)
    assert code == 0
    assert summary["name"] == "gpt2-small"
    assert summary["parameters"] == 124_439_808
    assert summary["parameters_estimate"] == 12 * 12 * 768**2 + 50257 * 768
    rows = {row["path"]: row for row in summary["modules"]}
    assert rows["head"]["shape"] == "N x 50257" and rows["head"]["parameters"] == 0  # tied: owned by the embedding
    assert rows["blocks.11"]["shape"] == "N x 768"
    assert rows["blocks.3.attn"]["distribution"] == "blockspec"
    assert rows["positional"]["component"] == "positional:learned"


def test_show_table(capsys):
    code, out, _ = run(capsys, "show", str(SPECS / "llama-style.toml"))
    assert code == 0
    assert "blocks.1-7" in out and "positional:rope" in out and "(rotates q, k)" in out
    assert "total parameters" in out and "12·L·d² + |V|·d" in out


def test_a_missing_plugin_names_the_component_and_the_distribution_to_install():
    """What a user sees after `pip uninstall blockspec-positional`."""
    import blockspec_activations
    import blockspec_blocks
    import blockspec_heads
    import blockspec_norms

    others = [(m, m.__name__.replace("_", "-"), "0.1.0")
              for m in (blockspec_norms, blockspec_activations, blockspec_heads, blockspec_blocks)]
    registry = load_registry(entry_points=False, plugins=others)
    assert registry.names("positional") == []
    with pytest.raises(blockspec.UnknownComponentError) as caught:
        blockspec.load_spec(SPECS / "gpt2-small.toml", registry)
    assert str(caught.value).endswith(
        "$.positional.use: positional 'learned' is not installed; "
        "install the distribution blockspec-positional "
        "(pip install blockspec-positional, or ./plugins/positional in a blockspec checkout)"
    )


def test_python_dash_m_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\nd_model = 'x'\n")
    done = subprocess.run([sys.executable, "-m", "blockspec", "check", str(bad)], capture_output=True, text=True)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert all(line.startswith("blockspec: error: ") for line in done.stderr.splitlines())
    assert f"{bad}:2: $.model.d_model: expected an integer" in done.stderr
