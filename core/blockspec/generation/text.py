"""``blockspec.generate``: continue a prompt from a model or any model source, in the source's own tokenizer.

The notebook's call over ``generation.tokens.generate``: a path is opened with ``sources.open_source`` (a
checkpoint, a training checkpoint, a Hugging Face directory), a text is encoded with the source's tokenizer
(``Source.tokenizer``, the one rule) and the result decoded with it. Every setting is a keyword, so a
settings object or streaming can join later without breaking a call. The defaults are the command's
(``blockspec generate``), so the same call gives the same text in both.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import torch
from attrs import frozen

from blockspec.data.tokenizer import Tokenizer
from blockspec.errors import InputError, Problem
from blockspec.generation.bounds import DEFAULT_NEW_TOKENS, DEFAULT_SEED, DEFAULT_TEMPERATURE
from blockspec.modules.transformer import Transformer
from blockspec.registry.components import Registry
from blockspec.sources import open_source
from blockspec.generation.stopping import StopReason, end_of_text_id, stop_reason
from blockspec.generation.streaming import TextStream
from blockspec.generation.tokens import generate_stream

INTEGER_IDS = (torch.long, torch.int32)  # what the token embedding takes
Prompt = str | Sequence[int] | torch.Tensor
FILTERS = ("top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty")  # sample()'s

__all__ = ["Generation", "generate", "stream"]


@frozen(kw_only=True)
class Generation:
    """What ``generate`` made: every id (the prompt's, then the new ones) and, with a tokenizer, their text."""

    ids: tuple[int, ...]
    prompt_length: int
    text: str | None  # all the ids decoded; None where no tokenizer goes with the model
    tokenizer: str | None  # the tokenizer's description ("characters (65)"), or None
    stop_reason: StopReason = "length"  # "eos": the end-of-text token (kept), "stop": a stop string, "length"

    @property
    def new_ids(self) -> tuple[int, ...]:
        return self.ids[self.prompt_length:]

    def __str__(self) -> str:
        return self.text if self.text is not None else ",".join(map(str, self.ids))


def generate(model: Transformer | str | os.PathLike[str], prompt: Prompt, *, max_new_tokens: int = DEFAULT_NEW_TOKENS,
             temperature: float = DEFAULT_TEMPERATURE, top_k: int | None = None, top_p: float | None = None,
             min_p: float | None = None, repetition_penalty: float | None = None, presence_penalty: float = 0.0,
             frequency_penalty: float = 0.0, seed: int | None = DEFAULT_SEED,
             tokenizer: Tokenizer | None = None, use_cache: bool = True, overflow: Literal["slide", "error"] = "slide",
             device: torch.device | str | None = None, registry: Registry | None = None,
             stop: Sequence[str] = (), eos: bool = True) -> Generation:
    """Continue ``prompt`` (a text, or token ids: a list, or a tensor (N,) or (1, N)) with ``model``.

    ``model``: a Transformer, or the path of any source with weights, loaded on ``device`` (a model
    object stays where it is). The text goes through ``tokenizer``, by default the source's own; a model
    object knows none, so a text prompt needs ``tokenizer=blockspec.load_tokenizer(path)``. Temperature 0
    is greedy (after the penalties); the other settings are ``generation.tokens.generate``'s. Generation ends early at a ``stop``
    text (the token that completes it is kept) or, with ``eos``, at the tokenizer's end-of-text token.
    """
    run = _Run.start(model, prompt, locals())  # every keyword, by name
    new = [int(token) for token in run.steps]
    return run.result(new)


def stream(model: Transformer | str | os.PathLike[str], prompt: Prompt, *, max_new_tokens: int = DEFAULT_NEW_TOKENS,
           temperature: float = DEFAULT_TEMPERATURE, top_k: int | None = None, top_p: float | None = None,
           min_p: float | None = None, repetition_penalty: float | None = None, presence_penalty: float = 0.0,
           frequency_penalty: float = 0.0, seed: int | None = DEFAULT_SEED,
           tokenizer: Tokenizer | None = None, use_cache: bool = True, overflow: Literal["slide", "error"] = "slide",
           device: torch.device | str | None = None, registry: Registry | None = None,
           stop: Sequence[str] = (), eos: bool = True) -> Iterator[str]:
    """``generate``'s new text as it is made, in pieces of whole characters that join to its text.

    The arguments are ``generate``'s and are checked before the first piece; a model without a
    tokenizer has no text to stream (use ``generate``, or ``generation.tokens.generate_stream`` for ids).
    """
    run = _Run.start(model, prompt, locals())  # every keyword, by name
    if run.tokenizer is None:
        raise InputError(Problem(path="tokenizer", message="streaming gives text, and no tokenizer goes with the model",
                                 hint="give tokenizer=blockspec.load_tokenizer(path), or use blockspec.generate"))
    return _pieces(run.steps, TextStream(1, run.tokenizer.decode))


def _pieces(steps: Iterator[torch.Tensor], text: TextStream) -> Iterator[str]:
    for step in steps:
        piece = text.push(step.tolist())[0]
        if piece:
            yield piece
    rest = text.flush()[0]
    if rest:
        yield rest


@frozen(kw_only=True)
class _Run:
    """One prompt's generation under way: its steps (each (1,)) and what makes a ``Generation`` of them."""

    steps: Iterator[torch.Tensor]
    prompt_ids: list[int]
    tokenizer: Tokenizer | None
    eos_id: int | None
    stop: tuple[str, ...]

    @classmethod
    def start(cls, model: object, prompt: Prompt, settings: dict) -> _Run:
        """The model and prompt resolved, the request checked, the steps ready to run."""
        model, tokenizer, source = _model_and_tokenizer(model, settings["tokenizer"], settings["device"],
                                                        settings["registry"])
        prompt_ids = _prompt_ids(prompt, tokenizer)
        stop = _stop_strings(settings["stop"], tokenizer)
        eos_id = end_of_text_id(tokenizer) if settings["eos"] and tokenizer is not None else None
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=_device_of(model))  # (1, N)
        steps = generate_stream(
            model, ids, max_new_tokens=settings["max_new_tokens"], temperature=settings["temperature"],
            top_k=settings["top_k"], seed=settings["seed"], use_cache=settings["use_cache"],
            **{name: settings[name] for name in FILTERS},
            overflow=settings["overflow"], source=source, vocab_limit=None if tokenizer is None else tokenizer.vocab_size,
            stop_ids=() if eos_id is None else (eos_id,), stop_strings=stop,
            decode=None if tokenizer is None else tokenizer.decode)
        return cls(steps=steps, prompt_ids=prompt_ids, tokenizer=tokenizer, eos_id=eos_id, stop=stop)

    def result(self, new: list[int]) -> Generation:
        ids, decode = self.prompt_ids + new, None if self.tokenizer is None else self.tokenizer.decode
        return Generation(ids=tuple(ids), prompt_length=len(self.prompt_ids),
                          text=None if decode is None else decode(ids),
                          tokenizer=None if self.tokenizer is None else self.tokenizer.describe(),
                          stop_reason=stop_reason(new, eos_id=self.eos_id, stop_strings=self.stop, decode=decode))


def _stop_strings(stop: object, tokenizer: Tokenizer | None) -> tuple[str, ...]:
    """``stop`` as a tuple of texts; they are matched on decoded text, so they need a tokenizer."""
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, Sequence) or not all(isinstance(text, str) and text for text in stop):
        raise InputError(Problem(path="stop", expected="texts of at least one character (a str or a list of them)",
                                 found=_described(stop)))
    if stop and tokenizer is None:
        raise InputError(Problem(path="stop", message="stop texts are matched on decoded text, and no tokenizer goes "
                                 "with the model", hint="give tokenizer=blockspec.load_tokenizer(path)"))
    return tuple(stop)


def _model_and_tokenizer(model: object, tokenizer: Tokenizer | None, device, registry: Registry | None
                         ) -> tuple[Transformer, Tokenizer | None, str]:
    """The model, the tokenizer its text goes through, and the name errors give it."""
    if isinstance(model, Transformer):
        return model, tokenizer, "the model"
    if not isinstance(model, (str, os.PathLike)):
        raise InputError(Problem(path="model", expected="a Transformer (blockspec.build or blockspec.load) or a path "
                                 "of a checkpoint or a Hugging Face directory", found=type(model).__name__))
    source = open_source(model, registry, with_weights=True)
    return source.model(device=device), tokenizer or source.tokenizer(), str(Path(model))


def _prompt_ids(prompt: object, tokenizer: Tokenizer | None) -> list[int]:
    """The prompt as a list of at least one token id; text through the tokenizer."""
    if isinstance(prompt, str):
        ids = _encoded(prompt, tokenizer)
    elif isinstance(prompt, torch.Tensor):
        ids = _tensor_ids(prompt)
    elif isinstance(prompt, Sequence) and not isinstance(prompt, (bytes, bytearray)) and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
        ids = list(prompt)
    else:
        raise InputError(Problem(path="prompt", expected="a text, or integer token ids (a list, or a tensor (N,) "
                                 "or (1, N))", found=_described(prompt)))
    if not ids:
        raise InputError(Problem(path="prompt", expected="at least one token", found="an empty prompt"))
    return ids


def _encoded(text: str, tokenizer: Tokenizer | None) -> list[int]:
    if tokenizer is None:
        raise InputError(Problem(path="prompt", message="a model object knows no tokenizer to encode text with",
                                 hint="give tokenizer=blockspec.load_tokenizer(path), the model's path, or token ids"))
    return tokenizer.encode(text)


def _tensor_ids(ids: torch.Tensor) -> list[int]:
    if ids.dtype not in INTEGER_IDS:
        raise InputError(Problem(path="prompt", expected="integer token ids (torch.long or torch.int32)",
                                 found=str(ids.dtype), hint="ids.long(), if they hold whole numbers"))
    if ids.dim() == 2 and ids.shape[0] == 1:
        ids = ids[0]  # (1, N) -> (N,)
    if ids.dim() != 1:
        raise InputError(Problem(path="prompt", expected="one sequence of token ids, (N,) or (1, N)",
                                 found=f"shape {tuple(ids.shape)}", hint="call generate once per prompt"))
    return ids.tolist()


def _described(prompt: object) -> str:
    """What a refused prompt was: its type, and for a list the types of its items (floats, say)."""
    if isinstance(prompt, Sequence) and not isinstance(prompt, (str, bytes)):
        kinds = sorted({type(item).__name__ for item in prompt})
        return f"{type(prompt).__name__} of {', '.join(kinds)}"
    return type(prompt).__name__


def _device_of(model: Transformer) -> torch.device:
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")
