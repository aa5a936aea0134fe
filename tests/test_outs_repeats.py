"""Issue 28, finding 2: a flag given twice. ``generate --prompt ab --prompt dc`` printed only ``dc``.

One rule for the whole command line (``cli/repeats.py``): a flag that can sensibly repeat keeps
every value (``REPEATABLE``); any other is refused when given twice, in one line with exit 2,
naming both values, whatever the command. The sweep below walks every command's flags, so a flag
added later follows the rule without a test of its own.
"""

from __future__ import annotations

import argparse
import json

import pytest

from blockspec.cli import COMMANDS, main, make_parser

from .cli_walk import commands
from .cli_run import run

# (command, flag): the flags that keep every value; every other flag is single
REPEATABLE = {("generate", "--prompt"), ("generate", "--ids"), ("sweep", "--vary"), ("trace", "--stage"),
              ("list", "--kind"), ("eval", "--data"), ("generate", "--stop")}
NOT_FLAGS = (argparse._HelpAction, argparse._VersionAction)
CANDIDATES = ("1", "0.5", "cpu", "x.toml")  # a value some argument type accepts


def flags():
    for words, parser in commands(make_parser()):
        for action in parser._actions:
            if action.option_strings and not isinstance(action, NOT_FLAGS):
                yield words, action


def a_value(action: argparse.Action) -> list[str]:
    """What to write after the flag once: nothing for a switch, else a value its type and choices accept."""
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(next(iter(action.choices)))]
    convert = action.type or str
    for text in CANDIDATES:
        try:
            convert(text)
            return [text]
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
    raise AssertionError(f"no candidate value for {action.option_strings}")


@pytest.fixture
def no_run(monkeypatch):
    """The refusal comes from the command line alone: no command runs (a repeated ``verify --thorough`` would)."""
    for command in COMMANDS:
        monkeypatch.setattr(command, "run", lambda args: 99)


SINGLE = [(words, action) for words, action in flags() if (" ".join(words), action.option_strings[0]) not in REPEATABLE]


@pytest.mark.parametrize(("words", "action"), SINGLE, ids=[f"{' '.join(w) or 'blockspec'} {a.option_strings[0]}"
                                                            for w, a in SINGLE])
def test_a_single_flag_given_twice_is_refused_in_one_line(capsys, no_run, words, action):
    value = a_value(action)
    first = action.option_strings[0]
    last = action.option_strings[-1]  # --compile, then --no-compile: the same setting
    code, out, err = run(capsys, *words, first, *value, last, *value)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"blockspec: error: {first}") and "given twice" in lines[0], err
    assert "Traceback" not in err and not out


def test_the_message_names_both_values(capsys, no_run):
    code, _, err = run(capsys, "train", "spec.toml", "--data", "d.txt", "--steps", "10", "--steps", "20")
    assert code == 2 and "--steps given twice: 10 and 20" in err, err
    code, _, err = run(capsys, "train", "spec.toml", "--data", "d.txt", "--compile", "--no-compile")
    assert code == 2 and "given twice: --compile and --no-compile" in err, err


def test_the_repeatable_flags_are_the_ones_that_keep_every_value():
    kept = {(" ".join(words), action.option_strings[0]) for words, action in flags()
            if isinstance(action, argparse._AppendAction)}
    assert kept == REPEATABLE


def generated(capsys, assets, *extra) -> tuple[int, str, str]:
    return run(capsys, "generate", assets.char_ckpt, "--temperature", "0", "--max-new-tokens", "4",
               "--device", "cpu", *extra)


def test_every_prompt_is_continued_in_turn_with_a_separator(capsys, assets):
    code, out, err = generated(capsys, assets, "--prompt", "ab", "--prompt", "dc")
    assert code == 0, err
    alone = [generated(capsys, assets, "--prompt", p)[1].rstrip("\n") for p in ("ab", "dc")]
    assert all(a.startswith(p) for a, p in zip(alone, ("ab", "dc")))
    assert out == f"==> prompt 1 of 2 <==\n{alone[0]}\n\n==> prompt 2 of 2 <==\n{alone[1]}\n"


def test_under_json_several_prompts_are_a_list_of_what_each_alone_gives(capsys, assets):
    code, out, err = generated(capsys, assets, "--prompt", "ab", "--prompt", "dc", "--json")
    assert code == 0, err
    alone = [json.loads(generated(capsys, assets, "--prompt", p, "--json")[1]) for p in ("ab", "dc")]
    assert json.loads(out) == alone and alone[0]["prompt"] == "ab" and alone[1]["prompt"] == "dc"


def test_several_id_prompts_print_one_line_each(capsys, assets):
    code, out, err = generated(capsys, assets, "--ids", "1,2", "--ids", "3")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("1,2,") and lines[1].startswith("3,"), out


def test_a_bad_prompt_among_several_is_refused_before_any_is_generated(capsys, assets):
    code, out, err = generated(capsys, assets, "--prompt", "ab", "--prompt", "")
    assert code == 2 and not out and "--prompt" in err, err


def test_trace_keeps_every_stage_pattern(capsys, assets):
    code, out, err = run(capsys, "trace", assets.ckpt, "--text", "to", "--device", "cpu", "--json",
                         "--stage", "embed*", "--stage", "logits")
    assert code == 0, err
    names = [s["name"] for s in json.loads(out)["stages"]]
    assert "logits" in names and any(n.startswith("embed") for n in names) and len(set(names)) == len(names)


def test_list_keeps_every_kind(capsys):
    code, out, err = run(capsys, "list", "--kind", "norm", "--kind", "positional", "--json")
    assert code == 0, err
    assert {c["kind"] for c in json.loads(out)} == {"norm", "positional"}


def test_a_repeatable_flag_still_takes_one_value_each_time(capsys, no_run):
    code, _, err = run(capsys, "generate", "ckpt", "--prompt", "ab", "--prompt=--")
    assert code == 2 and "--prompt: expected one value, found '--'" in err, err


def test_a_prompt_generate_would_refuse_stops_the_command_before_the_first_is_generated(capsys, assets, monkeypatch):
    import blockspec.generation.tokens as generation

    monkeypatch.setattr(generation, "generate", lambda *a, **k: pytest.fail("generated before every prompt was checked"))
    code, out, err = generated(capsys, assets, "--prompt", "ab", "--prompt", "a" * 70, "--overflow", "error")
    assert code == 2 and not out and "the prompt is too long" in err, err


@pytest.mark.parametrize("argv", [["--registry", "a.toml", "list", "--registry", "b.toml"],
                                  ["--registry=a.toml", "check", "x.toml", "--registry=b.toml"]])
def test_registry_before_and_after_the_command_is_given_twice(capsys, no_run, argv):
    """The command parses its own flags apart from blockspec's, so the rule is asked across the two."""
    code, out, err = run(capsys, *argv)
    assert code == 2 and not out
    assert err == "blockspec: error: --registry given twice: a.toml and b.toml (see blockspec --help)\n"


@pytest.mark.parametrize("argv", [["--registry", "a.toml", "list"], ["list", "--registry", "a.toml"]])
def test_registry_once_either_side_of_the_command_is_taken(monkeypatch, argv):
    seen = []
    from blockspec.cli import list_cmd
    monkeypatch.setattr(list_cmd, "run", lambda args: seen.append(args.registry) or 0)
    assert main(argv) == 0 and seen == ["a.toml"]
