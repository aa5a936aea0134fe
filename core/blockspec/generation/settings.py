"""What a generation request asks for, as one object: ``GenerationSettings``.

The command line, ``blockspec.generate``, ``blockspec.stream`` and ``generation.tokens`` read the same
object, so a setting is named, defaulted and bounded once (the bounds in ``generation.bounds``). It is
checked when it is made: a settings object that exists is one ``generate`` accepts, whatever the model
(the model-dependent checks, the vocabulary and the context length, come with the request). No torch here.
"""

from __future__ import annotations

from typing import Literal

from attrs import evolve, field, frozen

from blockspec.errors import InputError, Problem
from blockspec.spec.problems import did_you_mean
from blockspec.generation.bounds import (DEFAULT_NEW_TOKENS, DEFAULT_SEED, DEFAULT_TEMPERATURE,
                                         check_generation_arguments, check_sample_count)

__all__ = ["GenerationSettings", "settings_with"]


def _texts(value: object) -> tuple:
    """One text or several, as a tuple; anything else is kept whole for the check to name."""
    return (value,) if isinstance(value, str) else _items(value)


def _items(value: object) -> tuple:
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


@frozen(kw_only=True)
class GenerationSettings:
    """How to continue a prompt; the defaults are ``blockspec generate``'s, so a call and a command agree.

    ``temperature`` 0 is greedy (the argmax after the penalties). The filters and penalties are off at
    their defaults and apply in Hugging Face's order (``generation.processors``). ``seed`` seeds sample
    i of every prompt with ``seed + i``, so a prompt's text does not depend on the prompts batched with it.
    Generation ends at ``max_new_tokens``, at a ``stop`` text (matched on decoded text), at an id in
    ``stop_ids``, or, with ``eos``, at the tokenizer's end-of-text token. ``compile`` decodes each step after
    the prompt through one ``torch.compile``d graph over a static cache (CUDA graphs on CUDA): the same
    tokens, and on a GPU many times the tokens per second; the first call compiles (seconds).
    """

    max_new_tokens: int = DEFAULT_NEW_TOKENS
    temperature: float = DEFAULT_TEMPERATURE
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = DEFAULT_SEED
    num_samples: int = 1
    stop: tuple[str, ...] = field(default=(), converter=_texts)
    stop_ids: tuple[int, ...] = field(default=(), converter=_items)
    eos: bool = True
    use_cache: bool = True
    overflow: Literal["slide", "error"] = "slide"
    compile: bool = False  # decode with a static cache and a compiled, graph-captured step (generation.static_decode)

    def __attrs_post_init__(self) -> None:
        check_generation_arguments(
            max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
            min_p=self.min_p, repetition_penalty=self.repetition_penalty, presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty, seed=self.seed, overflow=self.overflow)
        check_sample_count(self.num_samples)
        _check_stops(self.stop, self.stop_ids)
        if self.compile and not self.use_cache:
            raise InputError(Problem(path="compile", expected="the KV cache on: the compiled step decodes from a "
                                     "static cache", found="use_cache=False", hint="drop one of them"))

    @property
    def filters(self) -> dict[str, float | int | None]:
        """``sample``'s keywords: the temperature, the filters and the penalties."""
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "min_p": self.min_p,
                "repetition_penalty": self.repetition_penalty, "presence_penalty": self.presence_penalty,
                "frequency_penalty": self.frequency_penalty}

    def row_seeds(self, n_prompts: int) -> list[int] | None:
        """The seed of each row of a batch of ``n_prompts`` prompts, each repeated ``num_samples`` times."""
        if self.seed is None:
            return None
        return [_wrapped(self.seed + sample) for _ in range(n_prompts) for sample in range(self.num_samples)]


def _wrapped(seed: int) -> int:
    """A seed past the largest torch takes (2**64 - 1) wraps to 0.., so seed + i is always one."""
    return seed - 2**64 if seed >= 2**64 else seed


def settings_with(settings: GenerationSettings | None, overrides: dict[str, object]) -> GenerationSettings:
    """``settings`` (default: the defaults) with the keywords a call gave instead; an unknown one is refused."""
    base = GenerationSettings() if settings is None else settings
    if not isinstance(base, GenerationSettings):
        raise InputError(Problem(path="settings", expected="a blockspec.GenerationSettings",
                                 found=type(base).__name__, hint="GenerationSettings(max_new_tokens=..., ...)"))
    unknown = sorted(set(overrides) - set(_NAMES))
    if unknown:
        raise InputError(Problem(path=unknown[0], message=f"{unknown[0]!r} is not a generation setting",
                                 hint=did_you_mean(unknown[0], _NAMES) or f"the settings: {', '.join(_NAMES)}"))
    return evolve(base, **overrides) if overrides else base


def _check_stops(stop: tuple[str, ...], stop_ids: tuple[int, ...]) -> None:
    if not all(isinstance(text, str) and text for text in stop):
        raise InputError(Problem(path="stop", expected="texts of at least one character (a str or a list of them)",
                                 found=f"{stop!r:.60}"))
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in stop_ids):
        raise InputError(Problem(path="stop_ids", expected="token ids (integers >= 0)", found=f"{stop_ids!r:.60}"))


_NAMES = tuple(attribute.name for attribute in GenerationSettings.__attrs_attrs__)
