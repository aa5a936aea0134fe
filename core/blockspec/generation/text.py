"""``blockspec.generate``: continue a prompt from a model or any model source, in the source's own tokenizer.

The notebook's call over ``generation.tokens.generate``: a path is opened with ``sources.open_source`` (a
checkpoint, a training checkpoint, a Hugging Face directory), a text is encoded with the source's tokenizer
(``Source.tokenizer``, the one rule) and the result decoded with it. Every setting is a keyword, so a
settings object or streaming can join later without breaking a call. The defaults are the command's
(``blockspec generate``), so the same call gives the same text in both.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
from attrs import frozen

from blockspec.data.tokenizer import Tokenizer
from blockspec.errors import InputError, Problem
from blockspec.modules.transformer import Transformer
from blockspec.registry.components import Registry
from blockspec.sources import open_source
from blockspec.generation.tokens import generate as sample_tokens

DEFAULT_NEW_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_SEED = 200, 0.8, 0  # the command's defaults
INTEGER_IDS = (torch.long, torch.int32)  # what the token embedding takes
Prompt = str | Sequence[int] | torch.Tensor

__all__ = ["Generation", "generate"]


@frozen(kw_only=True)
class Generation:
    """What ``generate`` made: every id (the prompt's, then the new ones) and, with a tokenizer, their text."""

    ids: tuple[int, ...]
    prompt_length: int
    text: str | None  # all the ids decoded; None where no tokenizer goes with the model
    tokenizer: str | None  # the tokenizer's description ("characters (65)"), or None

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
             device: torch.device | str | None = None, registry: Registry | None = None) -> Generation:
    """Continue ``prompt`` (a text, or token ids: a list, or a tensor (N,) or (1, N)) with ``model``.

    ``model``: a Transformer, or the path of any source with weights, loaded on ``device`` (a model
    object stays where it is). The text goes through ``tokenizer``, by default the source's own; a model
    object knows none, so a text prompt needs ``tokenizer=blockspec.load_tokenizer(path)``. Temperature 0
    is greedy (after the penalties); the other settings are ``generation.tokens.generate``'s.
    """
    model, tokenizer, source = _model_and_tokenizer(model, tokenizer, device, registry)
    prompt_ids = _prompt_ids(prompt, tokenizer)
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=_device_of(model))  # (1, N)
    out = sample_tokens(model, ids, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                        min_p=min_p, repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
                        frequency_penalty=frequency_penalty, seed=seed,
                        use_cache=use_cache, overflow=overflow, source=source,
                        vocab_limit=None if tokenizer is None else tokenizer.vocab_size)[0].tolist()
    return Generation(ids=tuple(out), prompt_length=len(prompt_ids),
                      text=None if tokenizer is None else tokenizer.decode(out),
                      tokenizer=None if tokenizer is None else tokenizer.describe())


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
