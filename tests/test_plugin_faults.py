"""Broken plugins, installed as real distributions, are quarantined whole; everything else keeps working.

For every fault and every load position (first, middle, last): exactly one warning line naming the
distribution, its version and the cause; the registry equals the one without the broken plugin;
strict mode turns the quarantine into a PluginError. The CLI runs in a subprocess with all of them
installed at once and still lists, checks and explains.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import blockspec
from blockspec import PluginError, SpecError, UnknownComponentError, load_registry, loads_spec
from blockspec.registry.loading import PluginWarning

from .conftest import ROOT, SPECS
from .plugin_dists import DUPLICATE, FAULTS, POSITIONS, InstalledDists, write_distribution

VERSION = "0.7.1"


def load_recording(**kwargs) -> tuple[blockspec.Registry, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PluginWarning)
        registry = load_registry(**kwargs)
    return registry, [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]


@pytest.fixture(scope="module")
def baseline() -> dict[bool, list]:
    """The components without any fault plugin, probed and not."""
    return {probe: list(load_registry(probe=probe)) for probe in (False, True)}


def install(tmp_path: Path, fault: str, position: str) -> tuple[str, InstalledDists]:
    distribution = f"{POSITIONS[position]}-{fault.replace('_', '-')}"
    write_distribution(tmp_path, distribution, VERSION, f"faulty_{fault}_{position}", FAULTS[fault][0])
    return distribution, InstalledDists(tmp_path)


@pytest.mark.parametrize("position", sorted(POSITIONS))
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_broken_plugin_is_quarantined_whole(fault, position, tmp_path, baseline):
    _, cause, needs_probe = FAULTS[fault]
    distribution, installed = install(tmp_path, fault, position)
    with installed:
        registry, lines = load_recording(probe=needs_probe)
    assert len(lines) == 1, lines
    assert f"plugin {distribution} {VERSION} quarantined: " in lines[0] and cause in lines[0], lines[0]
    assert "\n" not in lines[0]
    assert [q.distribution for q in registry.quarantined] == [distribution]
    assert list(registry) == baseline[needs_probe], "the registry must equal the one without the broken plugin"


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_strict_mode_turns_quarantine_into_failure(fault, tmp_path, monkeypatch):
    distribution, installed = install(tmp_path, fault, "middle")
    monkeypatch.setenv("BLOCKSPEC_STRICT_PLUGINS", "1")
    with installed, pytest.raises(PluginError) as caught:
        load_registry()  # strict mode probes too, so the shape fault fails here as well
    assert distribution in str(caught.value) and FAULTS[fault][1] in str(caught.value)


def test_the_shape_probe_is_off_by_default_so_list_stays_torch_free(tmp_path, baseline):
    distribution, installed = install(tmp_path, "shape_contract", "last")
    with installed:
        registry, lines = load_recording()
    assert lines == [] and registry.get("norm", "shrinknorm").distribution == distribution


def test_a_duplicate_name_is_kept_and_resolution_names_both(tmp_path, baseline):
    write_distribution(tmp_path, "acme-norms", VERSION, "acme_norms_dup", DUPLICATE)
    llama = (SPECS / "llama-style.toml").read_text(encoding="utf-8")
    with InstalledDists(tmp_path):
        registry, lines = load_recording()
    assert lines == [] and registry.quarantined == ()
    assert [c.distribution for c in registry.providers("norm", "rmsnorm")] == ["acme-norms", "blockspec-norms"]
    assert [c for c in registry if c.distribution != "acme-norms"] == baseline[False]
    with pytest.raises(SpecError) as caught:
        loads_spec(llama, registry, file="llama.toml")
    assert not isinstance(caught.value, UnknownComponentError)
    (problem,) = caught.value.problems
    assert problem.path == "$.norm.use"
    assert "acme-norms" in problem.message and "blockspec-norms" in problem.message
    assert 'use = "acme-norms:rmsnorm"' in problem.hint
    for pin in ("acme-norms", "blockspec-norms"):
        spec = loads_spec(llama.replace('use = "rmsnorm"', f'use = "{pin}:rmsnorm"'), registry)
        assert registry.get("norm", "rmsnorm", spec.norm.distribution).distribution == pin


def test_one_distribution_with_two_entry_points_lands_whole_or_not_at_all(tmp_path, baseline):
    good = "@hookimpl\ndef blockspec_register(register):\n    register('norm', 'twinnorm', TinyConfig, build_identity)"
    write_distribution(tmp_path, "twin-plugin", VERSION, "twin_good", good)
    (tmp_path / "twin_bad").mkdir()
    (tmp_path / "twin_bad" / "__init__.py").write_text("raise RuntimeError('the second half is broken')\n")
    entry_points = tmp_path / f"twin_plugin-{VERSION}.dist-info" / "entry_points.txt"
    entry_points.write_text("[blockspec]\na = twin_good\nb = twin_bad\n")
    with InstalledDists(tmp_path):
        registry, lines = load_recording()
    assert len(lines) == 1 and "twin-plugin" in lines[0] and "the second half is broken" in lines[0]
    assert list(registry) == baseline[False]


# ---------------------------------------------------------------- the CLI with every fault installed at once


@pytest.fixture(scope="module")
def all_faults(tmp_path_factory) -> dict[str, str]:
    """Every fault in one folder, spread over first, middle and last; returns the subprocess env."""
    root = tmp_path_factory.mktemp("faulty-site")
    for index, fault in enumerate(sorted(FAULTS)):
        position = sorted(POSITIONS)[index % 3]
        write_distribution(root, f"{POSITIONS[position]}-{fault.replace('_', '-')}", VERSION,
                           f"cli_faulty_{fault}", FAULTS[fault][0])
    write_distribution(root, "acme-norms", VERSION, "cli_acme_norms", DUPLICATE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOCKSPEC_")}
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def blockspec_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "blockspec", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def warning_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("blockspec: warning: ")]


AMBIGUOUS = "blockspec: warning: norm 'rmsnorm' is provided by acme-norms and blockspec-norms; "


def without_ambiguity(lines: list[str]) -> list[str]:
    """The plugin warnings, after checking list/doctor's one line for acme-norms' duplicate rmsnorm."""
    assert sum(line.startswith(AMBIGUOUS) for line in lines) == 1, "\n".join(lines)
    return [line for line in lines if not line.startswith(AMBIGUOUS)]


def unprobed_faults() -> list[str]:
    return sorted(f for f, (_, _, probe) in FAULTS.items() if not probe)


def test_cli_list_exits_0_with_one_line_per_broken_plugin(all_faults):
    result = blockspec_cli(all_faults, "list")
    assert result.returncode == 0, result.stderr
    lines = without_ambiguity(warning_lines(result.stderr))
    assert len(lines) == len(unprobed_faults()), "\n".join(lines)
    for fault in unprobed_faults():
        assert sum(fault.replace("_", "-") in line and VERSION in line and FAULTS[fault][1] in line
                   for line in lines) == 1, fault
    assert "Traceback" not in result.stderr
    assert result.stdout.count("rmsnorm") == 2 and "acme-norms" in result.stdout


def test_cli_help_and_check_work_with_broken_plugins(all_faults):
    assert blockspec_cli(all_faults, "--help").returncode == 0
    good = blockspec_cli(all_faults, "check", str(SPECS / "gpt2-small.toml"))
    assert good.returncode == 0 and "ok" in good.stdout, good.stderr
    assert len(warning_lines(good.stderr)) == len(FAULTS)  # check probes (it imports torch anyway)
    ambiguous = blockspec_cli(all_faults, "check", str(SPECS / "llama-style.toml"))
    assert ambiguous.returncode == 2
    errors = [line for line in ambiguous.stderr.splitlines() if line.startswith("blockspec: error: ")]
    assert len(errors) == 1 and "acme-norms" in errors[0] and "blockspec-norms" in errors[0]
    assert "Traceback" not in good.stderr + ambiguous.stderr


def test_cli_doctor_lists_loaded_and_quarantined_with_causes(all_faults):
    result = blockspec_cli(all_faults, "doctor")
    assert result.returncode == 0, result.stderr
    assert len(without_ambiguity(warning_lines(result.stderr))) == len(FAULTS)  # the probe catches the shape fault as well
    for fault, (_, cause, _) in FAULTS.items():
        assert fault.replace("_", "-") in result.stdout and cause in result.stdout, fault
    assert "acme-norms" in result.stdout and "QUARANTINED" in result.stdout and "torch" in result.stdout


def test_cli_strict_mode_fails_with_one_error_line(all_faults):
    result = blockspec_cli({**all_faults, "BLOCKSPEC_STRICT_PLUGINS": "1"}, "list")
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("blockspec: error: ")]
    assert len(errors) == 1 and "strict mode" in errors[0] and "Traceback" not in result.stderr


def test_cli_recovers_with_an_empty_plugin_selection(all_faults):
    result = blockspec_cli({**all_faults, "BLOCKSPEC_PLUGINS": ""}, "list")
    assert result.returncode == 0 and warning_lines(result.stderr) == []
    assert result.stdout.count("\n") == 6  # header, rule, the built-in attention, dense FFN, pre and post blocks
