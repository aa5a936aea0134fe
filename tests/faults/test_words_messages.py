"""Messages are safe to print (issue 22, item 8): a terminal control from a file never reaches the terminal.

Hostile keys and values in a spec, a config.json, a tokenizer, a file name, a tensor name, a flag and a
plugin's own error message: each error or warning line is escaped (``\\x1b``, ``\\u202e``), one line per
problem, exit 2 where the command fails; ordinary Unicode (names in any script) stays readable.
"""

from __future__ import annotations

import json
import unicodedata
import warnings

import pytest
import torch
from safetensors.torch import load_file, save_file

import blockspec
from blockspec.cli import main
from blockspec.errors import BlockspecError, FieldError, Problem, printable
from blockspec.interop import export_hf
from blockspec.registry.loading import PluginWarning

from ..plugin_dists import InstalledDists, write_distribution
from ..specs import spec_text
from ..weights_helpers import gpt2_spec, randomized
from ..cli_run import run

# Every class of character a terminal obeys, with the escape a message shows instead.
OBEYED = {"\x00": "\\x00", "\x07": "\\x07", "\x08": "\\x08", "\t": "\\x09", "\r": "\\x0d", "\x1b": "\\x1b",
          "\x7f": "\\x7f", "\x85": "\\x85", "\x9b": "\\x9b", "\u061c": "\\u061c", "\u200e": "\\u200e",
          "\u200f": "\\u200f", "\u2028": "\\u2028", "\u2029": "\\u2029", "\u202a": "\\u202a", "\u202e": "\\u202e",
          "\u2066": "\\u2066", "\u2069": "\\u2069"}
HOSTILE = "evil\x1b[31m\x1b]0;pwned\x07\r\u202e\x9b2J"  # recolour, retitle, rewrite the line, reverse, erase
READABLE = "Größe 模型 naïve Ελληνικά עברית 🙂"


BIDI = {"\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))}


def unsafe_characters(text: str) -> set[str]:
    """The characters of ``text`` a terminal would obey (the line break, which separates lines, aside):
    Unicode's controls (C0, DEL, C1), line and paragraph separators, and the bidi controls."""
    return {char for char in text if char != "\n"
            and (unicodedata.category(char) in ("Cc", "Zl", "Zp") or char in BIDI)}


def assert_safe_lines(stderr: str, *, level: str = "error") -> list[str]:
    """Every stderr line is one of blockspec's, prefixed, with no terminal control; returns the lines."""
    assert unsafe_characters(stderr) == set(), repr(stderr)
    lines = stderr.splitlines()
    assert lines and all(line.startswith(f"blockspec: {level}: ") for line in lines), stderr
    return lines


# ---------------------------------------------------------------- the one rendering


@pytest.mark.parametrize("char", sorted(OBEYED))
def test_every_obeyed_character_is_escaped_in_an_error(char):
    error = BlockspecError(f"value {char} here")
    assert str(error) == f"value {OBEYED[char]} here"
    assert error.render({"$.x": "--x"}) == str(error)


def test_unicode_names_stay_readable_and_escaping_is_idempotent():
    assert str(BlockspecError(Problem(file=f"{READABLE}.toml", path=f"$.{READABLE}", message=READABLE))) == \
        f"{READABLE}.toml: $.{READABLE}: {READABLE}"
    once = printable(HOSTILE)
    assert printable(once) == once and unsafe_characters(once) == set()


def test_a_problem_escapes_its_data_line_breaks_too_but_keeps_the_reports_own():
    problem = Problem(file="a\nb.toml", path="$.k\ney", expected="x\ny", found="f\nz")
    assert "\n" not in str(problem)
    assert str(problem) == "a\\x0ab.toml: $.k\\x0aey: expected x\\x0ay, found f\\x0az"
    assert str(BlockspecError(f"first{HOSTILE}\nsecond")).split("\n")[1] == "second"  # a report of two lines


def test_a_validators_field_error_is_escaped_where_it_is_built():
    assert unsafe_characters(FieldError("name", expected="a name", found=HOSTILE).message) == set()


# ---------------------------------------------------------------- the command line, file by file


def test_a_hostile_key_in_a_config_json(capsys, registry, tmp_path):
    directory = export_hf(randomized(blockspec.build(gpt2_spec(registry), registry=registry)), tmp_path / "hf")
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, HOSTILE: 1}))
    for argv in (("show", directory), ("import-hf", directory, "--out", tmp_path / "ck")):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == ""
        [line] = assert_safe_lines(err)
        assert "$.evil\\x1b[31m\\x1b]0;pwned\\x07\\x0d\\u202e\\x9b2J: unknown GPT-2 config key" in line
    assert not (tmp_path / "ck").exists()


def test_hostile_keys_and_values_in_a_spec(capsys, tmp_path):
    text = spec_text(name="m", vocab_size=64, context_length=32, d_model=32, n_layers=2, n_heads=4, d_ff=64)
    spec = tmp_path / "spec.toml"
    spec.write_text(text.replace('use = "gelu"', f'use = {json.dumps(HOSTILE)}')
                    + f"[model.extra]\n{json.dumps(HOSTILE)} = {json.dumps(HOSTILE)}\n")
    code, _, err = run(capsys, "check", spec)
    assert code == 2
    assert len(assert_safe_lines(err)) == 2, err  # the unknown activation, the unknown table


def test_a_hostile_file_name(capsys, tmp_path):
    code, _, err = run(capsys, "check", tmp_path / f"{HOSTILE}.toml")
    assert code == 2
    [line] = assert_safe_lines(err)
    assert "evil\\x1b[31m" in line and "cannot read spec" in line


def test_a_hostile_file_name_reaches_a_report_through_its_folder(capsys, tmp_path):
    folder = tmp_path / f"{HOSTILE}{READABLE}"
    folder.mkdir()
    (folder / "spec.toml").write_text("[model]\nname = 1\n")
    code, _, err = run(capsys, "check", folder / "spec.toml")
    assert code == 2 and READABLE in err
    assert_safe_lines(err)


def test_a_hostile_command_line_value(capsys):
    code, _, err = run(capsys, "check", "x.toml", f"--{HOSTILE}")
    assert code == 2
    [line] = assert_safe_lines(err)
    assert "unrecognized arguments: --evil\\x1b[31m" in line


def test_a_hostile_tensor_name(capsys, registry, tmp_path):
    directory = export_hf(randomized(blockspec.build(gpt2_spec(registry), registry=registry)), tmp_path / "hf")
    weights = directory / "model.safetensors"
    save_file({**load_file(weights), f"h.0.{HOSTILE}": torch.zeros(2)}, weights)
    code, _, err = run(capsys, "import-hf", directory, "--out", tmp_path / "ck")
    assert code == 2
    assert any("unexpected" in line and "evil\\x1b[31m" in line for line in assert_safe_lines(err))


def test_a_hostile_tokenizer(capsys, registry, tmp_path):
    directory = export_hf(randomized(blockspec.build(gpt2_spec(registry), registry=registry)), tmp_path / "hf")
    (directory / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}},
                                                          "added_tokens": [{"id": HOSTILE}]}))
    code, _, err = run(capsys, "generate", directory, "--prompt", "hi", "--device", "cpu")
    assert code == 2
    [line] = assert_safe_lines(err)
    assert "tokenizer.json: not a Hugging Face tokenizer" in line


# ---------------------------------------------------------------- a plugin's own words

HOSTILE_PLUGIN = f"raise RuntimeError({HOSTILE!r})"


@pytest.fixture
def hostile_plugin(tmp_path):
    write_distribution(tmp_path, "zzz-hostile", "1.0", "zzz_hostile_words", HOSTILE_PLUGIN)
    with InstalledDists(tmp_path):
        yield


def test_a_plugins_error_message_in_its_quarantine_warning(capsys, hostile_plugin):
    with warnings.catch_warnings():
        warnings.simplefilter("always", PluginWarning)
        code, _, err = run(capsys, "list", "--kind", "norm")
    assert code == 0
    hostile = [line for line in assert_safe_lines(err, level="warning") if "zzz-hostile" in line]
    assert len(hostile) == 1 and "RuntimeError: evil\\x1b[31m" in hostile[0]


def test_a_plugins_error_message_in_strict_mode(capsys, hostile_plugin, monkeypatch):
    monkeypatch.setenv("BLOCKSPEC_STRICT_PLUGINS", "1")
    code, _, err = run(capsys, "list")
    assert code == 2
    [line] = assert_safe_lines(err)
    assert "zzz-hostile" in line


def test_an_internal_error_is_one_escaped_line(capsys, monkeypatch):
    def crash(args):
        raise RuntimeError(f"first {HOSTILE}\nsecond line")

    monkeypatch.setattr("blockspec.cli.list_cmd.run", crash)
    code, _, err = run(capsys, "list")
    assert code == 1
    [line] = err.splitlines()
    assert line.startswith("blockspec: internal error: RuntimeError: first evil\\x1b[31m")
    assert unsafe_characters(err) == set()


def test_output_after_the_fix_is_unchanged_for_ordinary_text(capsys, tmp_path):
    spec = tmp_path / f"{READABLE}.toml"
    spec.write_text("[model]\nname = 1\n")
    code, _, err = run(capsys, "check", spec)
    assert code == 2 and f"{READABLE}.toml" in err and "\\x" not in err and "\\u" not in err


def test_json_output_escapes_what_a_terminal_would_obey_and_keeps_the_values(capsys, tmp_path):
    """JSON escapes C0 itself; DEL, C1 and the bidi controls it writes raw under ensure_ascii=False."""
    name = "\u202eevil\x9b2J" + READABLE
    spec = tmp_path / "spec.toml"
    text = spec_text(name="NAME", vocab_size=64, context_length=32, d_model=32, n_layers=2, n_heads=4, d_ff=64)
    spec.write_text(text.replace('"NAME"', json.dumps(name, ensure_ascii=False)), encoding="utf-8")
    code, out, err = run(capsys, "show", spec, "--json")
    assert code == 0, err
    assert unsafe_characters(out) == set() and READABLE in out
    assert json.loads(out)["name"] == name  # the value, unchanged


# ---------------------------------------------------------------- what a command prints on stdout


@pytest.mark.parametrize("command", ["show", "check"])
def test_a_hostile_model_name_is_escaped_on_stdout_too(capsys, tmp_path, command):
    """A spec's own name is data from a file: `show` and `check` print it in their reports (stdout), where it
    must not recolour, retitle or rewrite the terminal either; the report's own layout and Unicode stay."""
    spec = tmp_path / "evil.toml"
    spec.write_text(spec_text(name="x", vocab_size=65, context_length=16, d_model=16, n_layers=1, n_heads=2,
                              d_ff=32).replace('name = "x"', f"name = {json.dumps(HOSTILE + READABLE, ensure_ascii=False)}"),
                    encoding="utf-8")
    assert main([command, str(spec)]) == 0
    out = capsys.readouterr().out
    assert not [c for c in out if c in OBEYED and c != "\t"], repr(out)
    assert printable(HOSTILE, lines=False) + READABLE in out and out.count("\n") >= 1
