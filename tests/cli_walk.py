"""Every command of the command line, for tests that hold a rule over all of them (help, flags, outputs)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator


def commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                                                             argparse.ArgumentParser]]:
    """(words, parser) of the top level, every command and every nested action (``data prepare``)."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*words, name))
