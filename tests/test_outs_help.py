"""Issue 28, finding 4: ``blockspec <command> --help`` read as a newcomer reads it.

Every command's help renders; no help text holds a phrase that was found garbled or untrue
("... (indented) instead of text" glued after a sentence that already ends; ``--overflow``
counting characters where a model's tokens may be BPE pieces).
"""

from __future__ import annotations

import pytest

from blockspec.cli import main, make_parser

from .cli_walk import commands

BAD_PHRASES = ("(indented) instead of text", "context_length characters", "instead of a line per run instead")


COMMANDS = [words for words, _ in commands(make_parser())]


@pytest.mark.parametrize("words", COMMANDS, ids=[" ".join(w) or "blockspec" for w in COMMANDS])
def test_every_commands_help_renders_without_a_known_bad_phrase(capsys, words):
    assert main([*words, "--help"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: blockspec") and not err, err
    text = " ".join(out.split())  # argparse wraps lines: compare the words
    for phrase in BAD_PHRASES:
        assert phrase not in text, f"{' '.join(words)} --help says {phrase!r}"


def test_every_json_flag_says_what_it_prints_in_one_sentence():
    for words, parser in commands(make_parser()):
        for action in parser._actions:
            if "--json" in action.option_strings:
                assert action.help.startswith("print JSON instead of text: "), (words, action.help)
                assert action.help.count("instead of text") == 1, (words, action.help)


def test_generate_counts_the_window_in_tokens(capsys):
    assert main(["generate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "the last context_length tokens" in text and "characters" not in text.split("--overflow", 1)[1][:200]


def test_trace_and_explore_say_when_text_needs_ids(capsys):
    """Without a tokenizer, only a 65-token or >= 256-token vocabulary reads text; the help said "else bytes"."""
    for command in ("trace", "explore"):
        assert main([command, "--help"]) == 0
        text = " ".join(capsys.readouterr().out.split())
        assert "256" in text and "else give --ids" in text, text
