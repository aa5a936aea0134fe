"""Bounds checked before a spec's text reaches the TOML parser.

A spec is a few short tables. Text far outside that shape costs the parser
time (tomllib's dotted keys are quadratic in their depth) or stack (nested
arrays recurse), so it is refused first, with the line and column.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from blockspec.errors import Problem, SpecError

MAX_SPEC_BYTES = 1 << 20  # a real spec is well under 4 KiB
MAX_LINE_CHARS = 4096  # also bounds the depth of a dotted key (a.b.c...)
MAX_NESTING = 32  # arrays and inline tables; a spec needs at most 2

# What ends each lexical state, searched from the current position.
_NORMAL = re.compile(r'"""|\'\'\'|"|\'|#|[\[\]{}]')
_ENDS = {
    '"': re.compile(r'\\.|"|\n'),
    '"""': re.compile(r'\\.|"""', re.DOTALL),
    "'": re.compile(r"'|\n"),
    "'''": re.compile(r"'''"),
    "#": re.compile(r"\n"),
}


def parse(text: str, file: str | None) -> dict[str, Any]:
    """Guarded tomllib: size and nesting checked first, every parser failure a located SpecError."""
    check_text(text, file)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecError(_syntax_problem(error, file, text)) from None
    except RecursionError:  # the guard bounds nesting; these two are the parser's own limits, kept as backstops
        raise SpecError(Problem(file=file, line=1, message="invalid TOML: nested too deeply")) from None
    except ValueError as error:  # e.g. an integer past Python's 4300-digit conversion limit
        raise SpecError(Problem(file=file, line=1, message=f"invalid TOML: {str(error)[:120]}")) from None


def _syntax_problem(error: tomllib.TOMLDecodeError, file: str | None, text: str) -> Problem:
    message = str(error)
    line, column = line_and_column(text, len(text))  # tomllib says "(at end of document)"
    if "(at line " in message:
        message, _, where = message.rpartition(" (at line ")
        line_text, _, column_text = where.rstrip(")").partition(", column ")
        line, column = int(line_text), int(column_text)
    message = message.removesuffix(" (at end of document)")
    return Problem(file=file, line=line, column=column, message=f"invalid TOML: {message}")


def check_text(text: str, file: str | None) -> None:
    """Raise SpecError when ``text`` is too big, too wide or too deeply nested to be a spec."""
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError(Problem(file=file, line=1, message=(
            f"spec is {len(text):,} characters long; a spec holds at most {MAX_SPEC_BYTES:,}")))
    _check_lines(text, file)
    _check_nesting(text, file)


def _check_lines(text: str, file: str | None) -> None:
    for number, line in enumerate(text.split("\n"), start=1):
        if len(line) > MAX_LINE_CHARS:
            raise SpecError(Problem(file=file, line=number, column=MAX_LINE_CHARS + 1, message=(
                f"line is {len(line):,} characters long; a spec line holds at most {MAX_LINE_CHARS}")))


def _check_nesting(text: str, file: str | None) -> None:
    """Track [ and { outside strings and comments; refuse the first that goes too deep."""
    depth, position = 0, 0
    while (match := _NORMAL.search(text, position)) is not None:
        token, position = match.group(), match.end()
        if token in _ENDS:
            position = _skip(text, token, position)
        elif token in "[{":
            depth += 1
            if depth > MAX_NESTING:
                line, column = line_and_column(text, match.start())
                raise SpecError(Problem(file=file, line=line, column=column, message=(
                    f"arrays or inline tables nested more than {MAX_NESTING} deep; a spec needs at most 2")))
        else:
            depth = max(depth - 1, 0)


def _skip(text: str, opener: str, position: int) -> int:
    """The position just past the string or comment that ``opener`` started."""
    ends = _ENDS[opener]
    while (match := ends.search(text, position)) is not None:
        position = match.end()
        if not match.group().startswith("\\"):
            return position
    return len(text)


def line_and_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1
