"""The bounds of generation's arguments, stated once: ``generate()`` refuses what lies outside them before
any work, and the command line's argument types read the same numbers (this module imports no torch).

Each refusal is an ``InputError`` whose problem names the parameter as its path (``temperature``), so a
command renders it with its flag (``cli.common.flag_names``).
"""

from __future__ import annotations

import math
from numbers import Integral, Real

from blockspec.errors import InputError, Problem
from blockspec.train.seeds import SEEDS

MAX_NEW_TOKENS = 1_000_000  # more is a typo (hours of CPU), and past 2**63 torch cannot even size the cache
OVERFLOWS = ("slide", "error")


def check_generation_arguments(*, max_new_tokens: object, temperature: object, top_k: object, seed: object,
                               overflow: object, vocab_limit: object, vocab_size: int) -> None:
    """Refuse the first argument outside its bound, naming it and the value given."""
    _require("max_new_tokens", max_new_tokens, _integer(max_new_tokens, 0, MAX_NEW_TOKENS),
             f"an integer from 0 to {MAX_NEW_TOKENS:_}")
    _require("temperature", temperature, _real(temperature) and math.isfinite(temperature) and temperature >= 0,
             "a finite number >= 0 (0: greedy; a tiny one samples as greedy does)")
    _require("top_k", top_k, top_k is None or _integer(top_k, 1, math.inf), "None or an integer >= 1")
    _require("seed", seed, seed is None or _integer(seed, *SEEDS), f"None or an integer from {SEEDS[0]} to {SEEDS[1]}")
    _require("overflow", overflow, isinstance(overflow, str) and overflow in OVERFLOWS,
             " or ".join(map(repr, OVERFLOWS)))
    _require("vocab_limit", vocab_limit, vocab_limit is None or _integer(vocab_limit, 1, vocab_size),
             f"None or an integer from 1 to {vocab_size} (the model's vocabulary)")


def _require(name: str, value: object, holds: bool, expected: str) -> None:
    if not holds:
        raise InputError(Problem(path=name, expected=expected, found=f"{value!r:.60}"))


def _integer(value: object, low: float, high: float) -> bool:
    """An integer (a bool is not one, though Python says so) from ``low`` to ``high``."""
    return isinstance(value, Integral) and not isinstance(value, bool) and low <= value <= high


def _real(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)
