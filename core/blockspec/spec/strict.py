"""The one strict cattrs converter: no silent coercion, no ignored keys, bounded messages."""

from __future__ import annotations

import math
import reprlib
import typing
from typing import Any, Literal

import cattrs

INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # TOML integers are 64-bit; tomllib does not enforce it


def _strict_converter() -> cattrs.Converter:
    """No silent coercion ("false" -> True, 64.9 -> 64) and no ignored keys."""
    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    converter.register_structure_hook(int, _structure_int)
    converter.register_structure_hook(float, _structure_float)
    converter.register_structure_hook(bool, _structure_bool)
    converter.register_structure_hook(str, _structure_str)
    converter.register_structure_hook_func(_is_literal, _structure_literal)
    return converter


class _ShortRepr(reprlib.Repr):
    """reprlib with small limits; huge ints are described, not printed (str() refuses 4300+ digits)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother = 2, 60, 60
        self.maxlist = self.maxdict = self.maxtuple = self.maxset = 4

    def repr_int(self, value: int, level: int) -> str:
        bits = value.bit_length()
        return f"<{bits}-bit integer>" if bits > 64 else repr(value)


SHORT = _ShortRepr()


def describe(value: Any) -> str:
    """A bounded description: a 10,000-deep or megabyte value must not blow up a message."""
    return f"{type(value).__name__} {SHORT.repr(value)}"


def _structure_int(value: Any, _: type) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, found {describe(value)}")
    _check_int64(value)
    return value


def _check_int64(value: int) -> None:
    if not INT_MIN <= value <= INT_MAX:
        raise ValueError("expected an integer in [-2**63, 2**63 - 1] (TOML integers are 64-bit), "
                         f"found a {value.bit_length()}-bit integer")


def _structure_float(value: Any, _: type) -> float:
    """Ints are accepted only where the float is exact; inf and nan never are."""
    if type(value) not in (int, float):
        raise TypeError(f"expected a number, found {describe(value)}")
    if type(value) is int:
        _check_int64(value)
        if float(value) != value:
            raise ValueError(f"expected a number a float holds exactly, found int {value}; write it as a float")
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, found {describe(value)}")
    return float(value)


def _structure_bool(value: Any, _: type) -> bool:
    if type(value) is not bool:
        raise TypeError(f"expected true or false, found {describe(value)}")
    return value


def _structure_str(value: Any, _: type) -> str:
    if type(value) is not str:
        raise TypeError(f"expected a string, found {describe(value)}")
    return value


def _is_literal(tp: Any) -> bool:
    return typing.get_origin(tp) is Literal


def _structure_literal(value: Any, tp: Any) -> Any:
    choices = typing.get_args(tp)
    if type(value) not in {type(c) for c in choices} or value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"expected one of {listed}, found {describe(value)}")
    return value


CONVERTER = _strict_converter()
