"""One rule for a flag given more than once, for every command.

A flag that can sensibly repeat is declared ``action="append"`` and keeps every value
(``generate --prompt A --prompt B`` continues both). Any other flag is refused the second time,
in one line naming both values (``--steps given twice: 10 and 20``): argparse would keep the
last in silence, and a script that built the line twice would get the wrong run. The rule lives
in the actions every parser of the command line registers (``register_single_actions``), so a
command's flags follow it without saying so.
"""

from __future__ import annotations

import argparse
from typing import Any

GIVEN = "_flags_given"  # on the namespace while one parser parses: dest -> (option, values) first given
SHOWN = 40  # characters of a value a refusal quotes


class _Single:
    """An argparse action that refuses its second use; mixed in before the action it guards."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        given = namespace.__dict__.setdefault(GIVEN, {})
        if self.dest in given:
            parser.error(given_twice(self, given[self.dest], (option_string, values)))
        given[self.dest] = (option_string, values)
        super().__call__(parser, namespace, values, option_string)  # type: ignore[misc]


def given_twice(action: argparse.Action, first: tuple[str | None, Any], second: tuple[str | None, Any]) -> str:
    """``--steps given twice: 10 and 20``; a switch names the spellings used (``--compile and --no-compile``)."""
    name = first[0] or "/".join(action.option_strings)
    if action.nargs == 0:
        said = (first[0], second[0])
        return f"{name} given twice" if said[0] == said[1] else f"{name} given twice: {said[0]} and {said[1]}"
    return f"{name} given twice: {_shown(first[1])} and {_shown(second[1])}"


def _shown(values: Any) -> str:
    text = " ".join(map(str, values)) if isinstance(values, list) else str(values)
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}..."


def _single(action: type[argparse.Action]) -> type[argparse.Action]:
    return type(f"Single{action.__name__.lstrip('_')}", (_Single, action), {})


# the actions a flag names (``action=``), each replaced by its single-use form; "append" and "count" repeat
SINGLE_ACTIONS: dict[Any, type[argparse.Action]] = {
    None: _single(argparse._StoreAction),
    "store": _single(argparse._StoreAction),
    "store_const": _single(argparse._StoreConstAction),
    "store_true": _single(argparse._StoreTrueAction),
    "store_false": _single(argparse._StoreFalseAction),
    argparse.BooleanOptionalAction: _single(argparse.BooleanOptionalAction),
}


def register_single_actions(parser: argparse.ArgumentParser) -> None:
    """Make every flag ``parser`` (and its groups) will add single-use, unless it appends."""
    for name, action in SINGLE_ACTIONS.items():
        parser.register("action", name, action)


def forget_given(namespace: argparse.Namespace) -> None:
    """The record is the parser's, not a value of the command: gone once parsing is over."""
    namespace.__dict__.pop(GIVEN, None)
