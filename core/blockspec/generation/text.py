"""``blockspec.generate``: continue a prompt from a model or any model source, in the source's own tokenizer.

The notebook's call over ``generation.tokens.generate``: a path is opened with ``sources.open_source`` (a
checkpoint, a training checkpoint, a Hugging Face directory), a text is encoded with the source's tokenizer
(``Source.tokenizer``, the one rule) and the result decoded with it. The settings are one
``GenerationSettings`` (its fields may be given as keywords instead), whose defaults are the command's
(``blockspec generate``), so the same call gives the same text in both.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from attrs import evolve, frozen

from blockspec.data.tokenizer import Tokenizer
from blockspec.errors import InputError, Problem
from blockspec.modules.transformer import Transformer
from blockspec.registry.components import Registry
from blockspec.sources import open_source
from blockspec.generation.stopping import StopReason, end_of_text_id, stop_reason, until_stop
from blockspec.generation.streaming import TextStream
from blockspec.generation.settings import GenerationSettings, settings_with
from blockspec.generation.tokens import check_request, generate_stream

INTEGER_IDS = (torch.long, torch.int32)  # what the token embedding takes
Prompt = str | Sequence[int] | torch.Tensor

__all__ = ["Generation", "GenerationSettings", "generate", "stream"]


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


def generate(model: Transformer | str | os.PathLike[str], prompt: Prompt | Sequence[Prompt],
             settings: GenerationSettings | None = None, *, tokenizer: Tokenizer | None = None,
             device: torch.device | str | None = None, registry: Registry | None = None,
             **overrides: Any) -> Generation | list[Generation]:
    """Continue ``prompt`` (a text, or token ids: a list, or a tensor (N,) or (1, N)) with ``model``.

    ``settings``: a ``GenerationSettings`` (default: ``blockspec generate``'s defaults), with any of its fields
    given as keywords instead (``max_new_tokens=8``). One prompt with one sample gives a ``Generation``; a list
    of prompts (texts, id lists or tensors), or ``num_samples`` > 1, gives a list, prompt by prompt and each
    prompt's samples in order. Sample i of every prompt is seeded ``seed + i``, so a prompt's text does not
    depend on the others.

    ``model``: a Transformer, or the path of any source with weights, loaded on ``device`` (a model object
    stays where it is). The text goes through ``tokenizer``, by default the source's own; a model object
    knows none, so a text prompt needs ``tokenizer=blockspec.load_tokenizer(path)``. Generation ends early at a
    ``stop`` text (the token that completes it is kept) or, with ``eos``, at the tokenizer's end-of-text token.
    """
    several = _several(prompt)
    run = _Run.start(model, prompt if several else [prompt], settings_with(settings, overrides), tokenizer,
                     device, registry)
    made = run.results()
    return made if several or len(made) > 1 else made[0]


def stream(model: Transformer | str | os.PathLike[str], prompt: Prompt, settings: GenerationSettings | None = None,
           *, tokenizer: Tokenizer | None = None, device: torch.device | str | None = None,
           registry: Registry | None = None, **overrides: Any) -> Iterator[str]:
    """``generate``'s new text as it is made, in pieces of whole characters that join to its text.

    The arguments are ``generate``'s and are checked before the first piece; one prompt and one sample (a
    stream is one text). A model without a tokenizer has no text to stream (use ``generate``, or
    ``generation.tokens.generate_stream`` for ids).
    """
    settings = settings_with(settings, overrides)
    if _several(prompt) or settings.num_samples != 1:
        raise InputError(Problem(path="prompt" if _several(prompt) else "num_samples",
                                 expected="one prompt and one sample: a stream is one text",
                                 found="several prompts" if _several(prompt) else f"num_samples={settings.num_samples}",
                                 hint="call stream once per prompt, or use blockspec.generate"))
    run = _Run.start(model, [prompt], settings, tokenizer, device, registry)
    if run.tokenizer is None:
        raise InputError(Problem(path="tokenizer", message="streaming gives text, and no tokenizer goes with the model",
                                 hint="give tokenizer=blockspec.load_tokenizer(path), or use blockspec.generate"))
    return _pieces(run.steps(0), TextStream(1, run.tokenizer.decode))


def _several(prompt: object) -> bool:
    """Whether ``prompt`` is a list of prompts (texts, id lists, tensors) rather than one prompt."""
    return (isinstance(prompt, (list, tuple)) and bool(prompt)
            and all(isinstance(item, (str, list, tuple, torch.Tensor)) for item in prompt))


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
    """Prompts resolved against a model and its tokenizer, every request checked, ready to generate."""

    model: Transformer
    prompts: list[list[int]]
    settings: GenerationSettings
    tokenizer: Tokenizer | None
    source: str
    eos_id: int | None

    @classmethod
    def start(cls, model: object, prompts: Sequence[object], settings: GenerationSettings,
              tokenizer: Tokenizer | None, device, registry: Registry | None) -> _Run:
        """The model and prompts resolved, each request checked before any is generated."""
        model, tokenizer, source = _model_and_tokenizer(model, tokenizer, device, registry)
        _check_stop_texts(settings.stop, tokenizer)
        eos_id = end_of_text_id(tokenizer) if settings.eos and tokenizer is not None else None
        settings = evolve(settings, stop_ids=settings.stop_ids + ((eos_id,) if eos_id is not None else ()))
        run = cls(model=model, prompts=[_prompt_ids(prompt, tokenizer) for prompt in prompts], settings=settings,
                  tokenizer=tokenizer, source=source, eos_id=eos_id)
        for index in range(len(run.prompts)):
            check_request(model, run.ids(index), settings, vocab_limit=run.vocab_limit)
        return run

    @property
    def vocab_limit(self) -> int | None:
        return None if self.tokenizer is None else self.tokenizer.vocab_size

    @property
    def decode(self) -> Callable[[list[int]], str] | None:
        return None if self.tokenizer is None else self.tokenizer.decode

    def ids(self, index: int) -> torch.Tensor:
        return torch.tensor([self.prompts[index]], dtype=torch.long, device=_device_of(self.model))  # (1, N)

    def steps(self, index: int) -> Iterator[torch.Tensor]:
        """Prompt ``index``'s steps, each (S,): one token for each of its samples."""
        return generate_stream(self.model, self.ids(index), self.settings, vocab_limit=self.vocab_limit,
                               source=self.source, decode=self.decode)

    def results(self) -> list[Generation]:
        """Every prompt's samples, generated as one ragged batch, in order: prompt by prompt, sample by sample."""
        steps = list(generate_stream(self.model, self.prompts, self.settings, vocab_limit=self.vocab_limit,
                                     source=self.source, decode=self.decode))
        rows = torch.stack(steps, dim=1).tolist() if steps else [[] for _ in range(len(self.prompts) * self.samples)]
        made = []
        for row, new in enumerate(rows):  # (P·S, T): prompt row // S, sample row % S
            new = until_stop(new, stop_ids=self.settings.stop_ids, stop_strings=self.settings.stop, decode=self.decode)
            made.append(self.result(self.prompts[row // self.samples], new))
        return made

    @property
    def samples(self) -> int:
        return self.settings.num_samples

    def result(self, prompt_ids: list[int], new: list[int]) -> Generation:
        ids, decode = prompt_ids + new, self.decode
        return Generation(ids=tuple(ids), prompt_length=len(prompt_ids),
                          text=None if decode is None else decode(ids),
                          tokenizer=None if self.tokenizer is None else self.tokenizer.describe(),
                          stop_reason=stop_reason(new, eos_id=self.eos_id, stop_strings=self.settings.stop,
                                                  decode=decode))


def _check_stop_texts(stop: tuple[str, ...], tokenizer: Tokenizer | None) -> None:
    """Stop texts are matched on decoded text, so they need a tokenizer (``GenerationSettings`` checks the rest)."""
    if stop and tokenizer is None:
        raise InputError(Problem(path="stop", message="stop texts are matched on decoded text, and no tokenizer goes "
                                 "with the model", hint="give tokenizer=blockspec.load_tokenizer(path)"))


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
