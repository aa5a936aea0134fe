"""The one way a document the library reads becomes an object: the strict converter.

Every file blockspec reads (a spec's tables, registry.toml, a checkpoint's manifest and
[lock], a training checkpoint's training.json) is an attrs class with validators from
``spec.validators``, structured here. A bad document is reported whole, one line per
problem: ``file: $.path: expected X, found Y; did you mean ...``.
"""

from __future__ import annotations

from typing import Any, TypeVar

import attrs

from blockspec.errors import BlockspecError, Problem, SpecError
from blockspec.spec.problems import flatten, locate
from blockspec.spec.strict import CONVERTER

T = TypeVar("T")
MAX_PROBLEMS = 20  # a hostile document with a million bad entries still gives a short message


def structure_document(
    data: Any,
    cls: type[T],
    *,
    file: str | None,
    text: str | None = None,
    path: str = "$",
    error: type[BlockspecError] = SpecError,
) -> T:
    """``data`` (as tomllib or json gives it) as a ``cls``, or ``error`` listing every problem at once."""
    try:
        return CONVERTER.structure(data, cls)
    except Exception as failure:  # validators may raise anything; each becomes a located problem
        found = flatten(failure, path, cls)
    raise document_error(error, [
        attrs.evolve(problem, file=file, line=locate(text, problem.path) if text and problem.path else None)
        for problem in found
    ])


def document_error(error: type[BlockspecError], problems: list[Problem]) -> BlockspecError:
    """``error`` carrying ``problems`` (at most MAX_PROBLEMS of them, then a count)."""
    if len(problems) > MAX_PROBLEMS:
        rest = len(problems) - MAX_PROBLEMS
        problems = [*problems[:MAX_PROBLEMS], Problem(file=problems[0].file, message=f"... and {rest} more problems")]
    return error(problems)
