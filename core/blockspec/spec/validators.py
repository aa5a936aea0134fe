"""attrs validators that name the offending field, so errors carry a $.path."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from types import MappingProxyType
from typing import Any

import attrs
from attrs import field, frozen

from blockspec.errors import FieldError

Validator = Callable[[Any, Any, Any], None]  # attrs' (instance, attribute, value); raises FieldError
# The attribute a check or validator states its bound in, as JSON Schema keywords (``blockspec schema`` reads
# it); one that states none leaves the schema looser than the check, never stricter.
JSON_SCHEMA = "json_schema"


def _frozen_keywords(keywords: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(keywords))


@frozen
class Check:
    """A test a value must pass as it is structured: ``Annotated[str, Check(test, "what it must be")]``.

    Unlike an attrs validator it runs with the type checks, so one pass reports it together with
    unknown keys and wrong types (attrs validators run only once every key has been read).
    """

    test: Callable[[Any], bool]
    expected: str
    typed: bool = True  # "found int 0" (the type named) or "found 0"
    # the same test as JSON Schema keywords, where it has them ({"minimum": 1}); not part of equality
    json_schema: Mapping[str, Any] = field(factory=dict, converter=_frozen_keywords, eq=False)

    def __call__(self, instance: Any, attribute: Any, value: Any) -> None:
        """The same test as an attrs validator, for objects built in Python rather than read from a spec."""
        if not self.test(value):
            raise FieldError(attribute.name, expected=self.expected, found=repr(value))


class FieldErrors(FieldError):
    """Several fields failed together (cross-field checks); a FieldError for the first, listing all."""

    def __init__(self, errors: list[FieldError]) -> None:
        first = errors[0].problem
        super().__init__(errors[0].field, first.message, expected=first.expected, found=first.found, names=first.names)
        self.errors = errors


def _stating(keywords: dict[str, Any]) -> Callable[[Validator], Validator]:
    """Mark a validator with the JSON Schema keywords that say what it checks."""

    def mark(validator: Validator) -> Validator:
        setattr(validator, JSON_SCHEMA, _frozen_keywords(keywords))
        return validator

    return mark


@_stating({"minimum": 1})
def positive(instance: Any, attribute: Any, value: Any) -> None:
    """Sizes are counts: at least 1."""
    if value is not None and value < 1:
        raise FieldError(attribute.name, expected="a positive integer", found=repr(value))


def at_least(bound: float) -> Validator:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if value is not None and value < bound:
            raise FieldError(attribute.name, expected=f"a number >= {bound}", found=repr(value))

    return _stating({"minimum": bound})(check)


def in_range(low: float, high: float, *, high_open: bool = True) -> Validator:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        ok = low <= value < high if high_open else low <= value <= high
        if not ok:
            bracket = ")" if high_open else "]"
            raise FieldError(attribute.name, expected=f"a number in [{low}, {high}{bracket}", found=repr(value))

    return _stating({"minimum": low, "exclusiveMaximum" if high_open else "maximum": high})(check)


def greater_than(bound: float) -> Validator:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if not value > bound:
            raise FieldError(attribute.name, expected=f"a number > {bound}", found=repr(value))

    return _stating({"exclusiveMinimum": bound})(check)


def one_of(choices: Collection[Any]) -> Validator:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if value not in choices:
            listed = ", ".join(repr(c) for c in choices)
            raise FieldError(attribute.name, expected=f"one of {listed}", found=repr(value))

    return _stating({"enum": list(choices)})(check)


# Field metadata: the spec writer leaves the field out while it holds its default, so an option added to a
# config later does not change how existing specs dump (``field(default=..., metadata=OMIT_DEFAULT)``).
OMIT_DEFAULT = {"blockspec.omit_default": True}


SIZED_BY = "blockspec.sized_by"


def sized_by(entries: Callable[[Any, Any], int], per: str = "entry") -> dict[str, Any]:
    """Field metadata for a tuple option with one entry per something of the model (a head, a rotated pair):
    ``entries(config, model)`` is how many it needs, ``per`` what one entry is for. The assembler refuses another
    length at the option's key before the build, and the conformance kit fits the lists it draws to the model it
    draws (``field(metadata=sized_by(f, "head"))``)."""
    return {SIZED_BY: (entries, per)}


def sized_mismatches(config: Any, model: Any) -> list[tuple[str, str]]:
    """(field alias, message) for each set ``sized_by`` option whose length is not the one ``model`` needs."""
    found = []
    for attribute in attrs.fields(type(config)) if attrs.has(type(config)) else ():
        sized, value = attribute.metadata.get(SIZED_BY), getattr(config, attribute.name)
        if sized is None or not value:
            continue
        entries, per = sized
        if len(value) != (wanted := entries(config, model)):
            found.append((attribute.alias, f"expected {wanted} entries (one per {per}) for these sizes, "
                                           f"found {len(value)}"))
    return found
