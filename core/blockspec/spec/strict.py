"""The one strict cattrs converter: no silent coercion, no ignored keys, bounded messages."""

from __future__ import annotations

import math
import reprlib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import attrs
import cattrs
from cattrs.cols import homogenous_tuple_structure_factory, list_structure_factory, mapping_structure_factory
from cattrs.gen import make_dict_structure_fn

from blockspec.spec.validators import Check

INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # TOML integers are 64-bit; tomllib does not enforce it


def _strict_converter() -> cattrs.Converter:
    """No silent coercion ("false" -> True, 64.9 -> 64) and no ignored keys."""
    # use_alias: a private attribute is read and written under its alias ([model] head_dim)
    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True, use_alias=True)
    converter.register_structure_hook(int, _structure_int)
    converter.register_structure_hook(float, _structure_float)
    converter.register_structure_hook(bool, _structure_bool)
    converter.register_structure_hook(str, _structure_str)
    converter.register_structure_hook_func(_is_literal, _structure_literal)
    converter.register_structure_hook_func(_is_scalar_union, _structure_scalar_union)
    converter.register_structure_hook_factory(_is_checked, _checked)
    # Containers check their own shape first: cattrs would read a string as a list of characters,
    # and report a list where a table belongs as "'list' object has no attribute 'items'".
    converter.register_structure_hook_factory(attrs.has, _shaped(dict, "a table", make_dict_structure_fn))
    converter.register_structure_hook_factory(_is_mapping, _shaped(dict, "a table", mapping_structure_factory))
    converter.register_structure_hook_factory(_is_list, _shaped(list, "an array", list_structure_factory))
    converter.register_structure_hook_factory(
        _is_homogeneous_tuple, _shaped((list, tuple), "an array", homogenous_tuple_structure_factory))
    return converter


def _shaped(kind: type | tuple[type, ...], expected: str, factory: Any) -> Any:
    """A hook factory: cattrs' own hook for the type, behind an isinstance check."""

    def make(cl: Any, converter: cattrs.Converter) -> Any:
        base = factory(cl, converter)

        def structure(value: Any, _: Any) -> Any:
            if not isinstance(value, kind):
                raise TypeError(f"expected {expected}, found {describe(value)}")
            return base(value, cl)

        return structure

    return make


def _is_checked(tp: Any) -> bool:
    return typing.get_origin(tp) is Annotated and any(isinstance(m, Check) for m in tp.__metadata__)


def _checked(tp: Any, converter: cattrs.Converter) -> Any:
    """The annotated type's own hook, then each Check on the result."""
    base_type = typing.get_args(tp)[0]
    checks = [m for m in tp.__metadata__ if isinstance(m, Check)]

    def structure(value: Any, _: Any) -> Any:
        result = converter.structure(value, base_type)
        for check in checks:
            if not check.test(result):
                found = describe(value) if check.typed else SHORT.repr(value)
                raise ValueError(f"expected {check.expected}, found {found}")
        return result

    return structure


def _is_mapping(tp: Any) -> bool:
    return typing.get_origin(tp) in (dict, Mapping) or tp is dict


def _is_list(tp: Any) -> bool:
    return typing.get_origin(tp) in (list, Sequence) or tp is list


def _is_homogeneous_tuple(tp: Any) -> bool:
    args = typing.get_args(tp)
    return typing.get_origin(tp) is tuple and len(args) == 2 and args[1] is Ellipsis


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


_SCALARS = {float: _structure_float, str: _structure_str}


def _is_scalar_union(tp: Any) -> bool:
    """float | str (| None): a number or a keyword, e.g. [model] embedding_scale = 2.0 or "sqrt_d"."""
    args = set(typing.get_args(tp)) - {type(None)}
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and args == set(_SCALARS)


def _structure_scalar_union(value: Any, tp: Any) -> Any:
    if value is None and type(None) in typing.get_args(tp):
        return None
    if type(value) is str:
        return value
    if type(value) in (int, float):
        return _structure_float(value, float)
    raise TypeError(f"expected a number or a string, found {describe(value)}")


def _is_literal(tp: Any) -> bool:
    return typing.get_origin(tp) is Literal


def _structure_literal(value: Any, tp: Any) -> Any:
    choices = typing.get_args(tp)
    if type(value) not in {type(c) for c in choices} or value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"expected one of {listed}, found {describe(value)}")
    return value


CONVERTER = _strict_converter()
