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

# the defaults of `blockspec generate` and `blockspec.generate`, stated once, so the same call gives the same text
DEFAULT_NEW_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_SEED = 200, 0.8, 0
MAX_NEW_TOKENS = 1_000_000  # more is a typo (hours of CPU), and past 2**63 torch cannot even size the cache
OVERFLOWS = ("slide", "error")
MAX_REPETITION_PENALTY = 1e6  # finite: a logit divided by inf is NaN-free but a penalty of inf is surely a typo
MAX_SAMPLES = 4096  # rows of one batch; more is surely a typo, and the memory check sizes the rest
MAX_ADDITIVE_PENALTY = 2.0  # the presence and frequency penalties' range in OpenAI's API, which vLLM shares
DEFAULT_DRAFT_TOKENS = 4  # speculative decoding: how many tokens the draft proposes per round


def check_generation_arguments(*, max_new_tokens: object, temperature: object, top_k: object, seed: object,
                               overflow: object, top_p: object = None,
                               min_p: object = None, repetition_penalty: object = None,
                               presence_penalty: object = 0.0, frequency_penalty: object = 0.0) -> None:
    """Refuse the first argument outside its bound, naming it and the value given."""
    _require("max_new_tokens", max_new_tokens, _integer(max_new_tokens, 0, MAX_NEW_TOKENS),
             f"an integer from 0 to {MAX_NEW_TOKENS:_}")
    _require("temperature", temperature, _real(temperature) and math.isfinite(temperature) and temperature >= 0,
             "a finite number >= 0 (0: greedy; a tiny one samples as greedy does)")
    _require("top_k", top_k, top_k is None or _integer(top_k, 1, math.inf), "None or an integer >= 1")
    check_sampling_filters(top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty,
                           presence_penalty=presence_penalty, frequency_penalty=frequency_penalty)
    _require("seed", seed, seed is None or _integer(seed, *SEEDS), f"None or an integer from {SEEDS[0]} to {SEEDS[1]}")
    _require("overflow", overflow, isinstance(overflow, str) and overflow in OVERFLOWS,
             " or ".join(map(repr, OVERFLOWS)))


def check_vocab_limit(vocab_limit: object, vocab_size: int) -> None:
    """The ids sampling may draw: below the tokenizer's vocabulary, which must lie inside the model's."""
    _require("vocab_limit", vocab_limit, vocab_limit is None or _integer(vocab_limit, 1, vocab_size),
             f"None or an integer from 1 to {vocab_size} (the model's vocabulary)")


def check_sample_count(num_samples: object) -> None:
    """Samples per prompt: each is a row of the batch, so the bound is the batch a step can hold."""
    _require("num_samples", num_samples, _integer(num_samples, 1, MAX_SAMPLES), f"an integer from 1 to {MAX_SAMPLES:_}")


def check_sampling_filters(*, top_p: object, min_p: object, repetition_penalty: object, presence_penalty: object,
                           frequency_penalty: object) -> None:
    """The filters and penalties of ``generation.processors``: off is None (or 0 for the additive penalties)."""
    _require("top_p", top_p, top_p is None or (_real(top_p) and 0 < top_p <= 1), "None or a number in (0, 1]")
    _require("min_p", min_p, min_p is None or (_real(min_p) and 0 <= min_p <= 1), "None or a number in [0, 1]")
    _require("repetition_penalty", repetition_penalty, repetition_penalty is None or (
        _real(repetition_penalty) and 0 < repetition_penalty <= MAX_REPETITION_PENALTY),
        f"None or a number > 0 and <= {MAX_REPETITION_PENALTY:g} (1: off)")
    for name, value in (("presence_penalty", presence_penalty), ("frequency_penalty", frequency_penalty)):
        _require(name, value, _real(value) and -MAX_ADDITIVE_PENALTY <= value <= MAX_ADDITIVE_PENALTY,
                 f"a number from -{MAX_ADDITIVE_PENALTY:g} to {MAX_ADDITIVE_PENALTY:g} (0: off)")


def check_draft_tokens(draft_tokens: object) -> None:
    """Speculative decoding's K: how many tokens the draft proposes before the target checks them."""
    _require("draft_tokens", draft_tokens, _integer(draft_tokens, 1, MAX_NEW_TOKENS),
             f"an integer from 1 to {MAX_NEW_TOKENS:_}")


def _require(name: str, value: object, holds: bool, expected: str) -> None:
    if not holds:
        raise InputError(Problem(path=name, expected=expected, found=f"{value!r:.60}"))


def _integer(value: object, low: float, high: float) -> bool:
    """An integer (a bool is not one, though Python says so) from ``low`` to ``high``."""
    return isinstance(value, Integral) and not isinstance(value, bool) and low <= value <= high


def _real(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)
