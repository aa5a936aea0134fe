"""The load policy: registry files with allow/deny, BLOCKSPEC_PLUGINS, --registry and BLOCKSPEC_REGISTRY."""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import warnings

import pytest

from blockspec import SpecError, UnknownComponentError, load_registry, loads_spec
from blockspec.registry.catalogue import PolicyTable, provider_of, shipped_registry_file
from blockspec.cli import main as cli_main
from blockspec.registry.loading import PluginPolicyWarning, PluginWarning, discover
from blockspec.registry.policy import Policy, current_policy

from .conftest import SPECS
from .plugin_dists import FAULTS, InstalledDists, write_distribution

INSTALLED = sorted({ep.dist.name for ep in discover()})  # first-party plugins, and the example third-party one
GPT2 = (SPECS / "gpt2-small.toml").read_text(encoding="utf-8")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in ("BLOCKSPEC_PLUGINS", "BLOCKSPEC_REGISTRY", "BLOCKSPEC_STRICT_PLUGINS"):
        monkeypatch.delenv(name, raising=False)


def distributions(registry) -> list[str]:
    return sorted(registry.distributions())


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("policy", "loaded"), [
    (Policy(), INSTALLED),
    (Policy(deny=("blockspec-heads",)), [d for d in INSTALLED if d != "blockspec-heads"]),
    (Policy(load="allowed", allow=("blockspec_norms",)), ["blockspec-norms"]),
    (Policy(load="allowed"), []),
    (Policy(selected=()), []),
    (Policy(selected=("Blockspec-Norms", "blockspec-heads"), deny=("blockspec-heads",)), ["blockspec-norms"]),
    (Policy(load="allowed", allow=("blockspec-heads",), selected=("blockspec-norms",)), ["blockspec-norms"]),
])
def test_policy_selects_distributions_and_deny_always_wins(policy, loaded):
    registry = load_registry(policy=policy)
    assert distributions(registry) == sorted(["blockspec", *loaded])  # the core's built-ins always load
    assert sorted(s.distribution for s in registry.skipped) == sorted(set(INSTALLED) - set(loaded))


def test_plugins_env_empty_loads_none_and_names_a_typo(monkeypatch):
    monkeypatch.setenv("BLOCKSPEC_PLUGINS", "")
    assert distributions(load_registry()) == ["blockspec"]
    monkeypatch.setenv("BLOCKSPEC_PLUGINS", "blockspec-norm, blockspec-heads")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PluginWarning)
        registry = load_registry()
    lines = [str(w.message) for w in caught if w.category is PluginPolicyWarning]
    assert lines == ["BLOCKSPEC_PLUGINS names 'blockspec-norm', which is not installed; "
                     "did you mean 'blockspec-norms'?"]
    assert distributions(registry) == ["blockspec", "blockspec-heads"]


def test_a_deselected_broken_plugin_is_never_imported(tmp_path, monkeypatch):
    write_distribution(tmp_path, "aaa-exploding", "1.0", "exploding_plugin", FAULTS["system_exit"][0])
    monkeypatch.setenv("BLOCKSPEC_PLUGINS", ",".join(INSTALLED))
    with InstalledDists(tmp_path), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PluginWarning)
        registry = load_registry()
        assert "exploding_plugin" not in sys.modules
    assert caught == [] and registry.quarantined == ()
    assert [str(s) for s in registry.skipped] == ["plugin aaa-exploding 1.0 not loaded: not in BLOCKSPEC_PLUGINS"]


def test_a_registry_file_can_deny_a_broken_plugin(tmp_path, monkeypatch):
    site = tmp_path / "site"
    write_distribution(site, "aaa-exploding", "1.0", "exploding_plugin2", FAULTS["runtime_error"][0])
    policy_file = tmp_path / "registry.toml"
    policy_file.write_text('[policy]\ndeny = ["aaa-exploding"]\n', encoding="utf-8")
    monkeypatch.setenv("BLOCKSPEC_REGISTRY", str(policy_file))
    with InstalledDists(site):
        registry = load_registry()
        assert "exploding_plugin2" not in sys.modules
    assert registry.quarantined == () and [s.distribution for s in registry.skipped] == ["aaa-exploding"]
    assert str(policy_file) in registry.skipped[0].reason


def test_registry_flag_applies_to_the_command_only(tmp_path):
    policy_file = tmp_path / "mine.toml"
    policy_file.write_text('[policy]\nload = "allowed"\nallow = ["blockspec-norms"]\n', encoding="utf-8")
    code, out, err = run_cli("--registry", str(policy_file), "list")
    assert code == 0 and err == ""
    assert {line.split()[2] for line in out.splitlines()[2:]} == {"blockspec", "blockspec-norms"}
    assert current_policy().source == shipped_registry_file().source  # the override did not leak


def test_a_spec_needing_a_plugin_the_policy_left_out_says_so(monkeypatch):
    monkeypatch.setenv("BLOCKSPEC_PLUGINS", "blockspec-positional,blockspec-activations,blockspec-heads,blockspec-blocks")
    with pytest.raises(UnknownComponentError) as caught:
        loads_spec(GPT2, load_registry(), file="gpt2.toml")
    (problem,) = caught.value.problems
    assert problem.path == "$.norm.use"
    assert "not loaded: blockspec-norms not in BLOCKSPEC_PLUGINS" in problem.message
    assert "BLOCKSPEC_PLUGINS" in problem.hint


BAD_FILES = {
    '[policy]\nload = "some"\n': ["$.policy.load"],
    '[policy]\nalow = ["x"]\ndeny = "blockspec-heads"\n': ["$.policy.alow", "$.policy.deny"],
    '[polcy]\nload = "all"\n': ["$.polcy"],
    'policy = 3\n': ["$.policy"],
    '[distributions.acme]\nprovides = ["rmsnorm"]\npth = "x"\n': ["$.distributions.acme.pth",
                                                                  "$.distributions.acme.provides[0]"],
}


@pytest.mark.parametrize(("text", "paths"), BAD_FILES.items())
def test_registry_file_problems_are_spec_errors_with_file_and_path(text, paths, tmp_path):
    policy_file = tmp_path / "bad.toml"
    policy_file.write_text(text, encoding="utf-8")
    code, out, err = run_cli("--registry", str(policy_file), "list")
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert sorted(line.split(": ")[3] for line in lines) == sorted(paths), lines
    located = re.compile(rf"blockspec: error: {re.escape(str(policy_file))}(:\d+)?: \$\.")  # the line, where found
    assert all(located.match(line) for line in lines), lines


def test_a_missing_or_unparsable_registry_file_is_one_error_line(tmp_path, monkeypatch):
    monkeypatch.setenv("BLOCKSPEC_REGISTRY", str(tmp_path / "absent.toml"))
    with pytest.raises(SpecError, match="cannot read registry file"):
        load_registry()
    (tmp_path / "broken.toml").write_text("[policy\n", encoding="utf-8")
    code, _, err = run_cli("--registry", str(tmp_path / "broken.toml"), "list")
    assert code == 2 and len(err.splitlines()) == 1 and "invalid TOML" in err


def test_a_users_catalogue_names_the_distribution_to_install(tmp_path, monkeypatch):
    policy_file = tmp_path / "acme.toml"
    policy_file.write_text('[distributions.acme-norms]\nprovides = ["norm:fancynorm"]\n', encoding="utf-8")
    monkeypatch.setenv("BLOCKSPEC_REGISTRY", str(policy_file))
    assert provider_of("norm", "fancynorm") == "acme-norms"
    assert provider_of("norm", "rmsnorm") == "blockspec-norms"  # the shipped catalogue still counts
    with pytest.raises(UnknownComponentError) as caught:
        loads_spec(GPT2.replace('use = "layernorm"', 'use = "fancynorm"'), load_registry())
    assert "pip install acme-norms" in caught.value.problems[0].hint


def test_the_shipped_policy_loads_all():
    shipped = shipped_registry_file()
    assert shipped.policy == PolicyTable(load="all") and current_policy() == Policy(load="all", source=shipped.source)


def test_doctor_json_reports_policy_versions_and_probe_gaps(monkeypatch):
    monkeypatch.setenv("BLOCKSPEC_PLUGINS", "blockspec-heads,blockspec-norms")
    code, out, err = run_cli("doctor", "--json")
    report = json.loads(out)
    assert code == 0 and err == ""
    assert [(r["distribution"], r["components"]) for r in report["loaded"]] == [
        ("blockspec", 4), ("blockspec-heads", 2), ("blockspec-norms", 2)]  # the core's attention, FFN, pre and post
    assert {s["distribution"] for s in report["skipped"]} == set(INSTALLED) - {"blockspec-heads", "blockspec-norms"}
    assert "BLOCKSPEC_PLUGINS = blockspec-heads,blockspec-norms" in report["policy"]
    assert report["torch"].startswith("2.") and report["quarantined"] == []
    assert [line.split(" (")[0] for line in report["unprobed"]] == ["head:classifier"]


def test_a_registry_file_syntax_error_names_its_line_and_column(tmp_path):
    from blockspec.registry.catalogue import parse_registry_file

    text = '[policy]\nload = "all"\n\n[policy.x\n'
    with pytest.raises(SpecError) as caught:
        parse_registry_file(text, "mine.toml")
    (problem,) = caught.value.problems
    assert (problem.file, problem.line, problem.column) == ("mine.toml", 4, 10)
    assert problem.message == "invalid TOML: Expected ']' at the end of a table declaration"
