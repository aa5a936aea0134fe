"""What ``trace`` and ``explore`` follow: a source's model, one input as ids, and how both were made.

The input's tokenizer is the source's own (``blockspec.sources``' one rule); a model without
one takes text through ``stand_in_tokenizer``, and the report says so. Errors name the
argument they are about at the start of the line (``text:``, ``ids:``, ``weights:``), so a
command can name its own flags.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from attrs import frozen

from blockspec.checkpoint.weights_file import load_weights
from blockspec.data.tokenizer import Tokenizer, TokenizerError, parse_ids
from blockspec.assembly.memory import check_fits
from blockspec.errors import CheckpointError, InputError, Problem
from blockspec.inspect.trace import Trace, trace_estimate
from blockspec.modules.transformer import Transformer
from blockspec.sources import Source, is_checkpoint, open_source, text_tokenizer


MAX_TRACE_TOKENS = 2**16  # far past what a trace's table is read at; 4,000 already needs GBs of stages


@frozen(kw_only=True)
class Subject:
    """A model ready to trace (evaluation mode), its input, and how both were made (for the report)."""

    model: Transformer
    ids: list[int]
    labels: list[str]  # one printable label per token
    tokenizer: Tokenizer | None  # None: ids given, and no tokenizer to spell them
    weights: str  # "random (seed 0; ...)", or the source or file the weights came from

    def input(self) -> torch.Tensor:
        """The input as a (1, N) tensor on the model's device."""
        return torch.tensor([self.ids], device=self.model.embedding.weight.device)


def open_subject(source: Source, *, text: str | None = None, ids: str | None = None, weights: str | None = None,
                 seed: int = 0, device: torch.device | str = "cpu", memory_check: bool = True) -> Subject:
    """``source``'s model (or its spec's, filled from ``weights``, or random from ``seed``) and ``text`` or ``ids``.

    ``weights`` may be a checkpoint of the same model: its weights and its tokenizer are used. The
    input is checked before the model is built, so bad input fails fast; so is the memory tracing it needs,
    unless not ``memory_check``."""
    origin = _checkpoint_of_same_model(weights, source) if weights and is_checkpoint(weights) else source
    token_ids, tokenizer = _input_ids(origin.tokenizer(), source.spec.model.vocab_size, text, ids)
    _check_length(token_ids, "ids" if ids is not None else "text")
    if memory_check:
        estimate = trace_estimate(source.spec, source.registry, len(token_ids))
        check_fits(estimate, torch.device(device), doing=f"tracing {len(token_ids):,} tokens", source=str(source.path))
    model = _model(source, origin, weights, seed).to(device).eval()
    described = weights or (str(source.path) if source.has_weights else
                            f"random (seed {seed}; pass --weights FILE for trained ones)")
    return Subject(model=model, ids=token_ids, labels=[label_of(tokenizer, i) for i in token_ids],
                   tokenizer=tokenizer, weights=described)


def _check_length(token_ids: list[int], given: str) -> None:
    """A trace keeps every stage, (h, N, N) attention among them: its length is bounded before any is sized."""
    if len(token_ids) > MAX_TRACE_TOKENS:
        raise InputError(Problem(path=given, expected=f"at most {MAX_TRACE_TOKENS:,} tokens to trace",
                                 found=f"{len(token_ids):,}", hint="trace a shorter input"))


def _input_ids(own: Tokenizer | None, vocab_size: int, text: str | None,
               ids: str | None) -> tuple[list[int], Tokenizer | None]:
    if ids is not None:
        return parse_ids(ids, vocab_size), own if own is not None else _stand_in_or_none(vocab_size)
    if not text:
        raise TokenizerError(Problem(path="text", expected="at least one character", found="an empty text"))
    tokenizer = text_tokenizer(own, vocab_size)
    try:
        return tokenizer.encode(text), tokenizer
    except TokenizerError as error:
        raise TokenizerError(Problem(path="text", message=str(error), hint="or give {token_ids} instead of {text}",
                                     names={"token_ids": "token ids", "text": "text"})) from None


def _stand_in_or_none(vocab_size: int) -> Tokenizer | None:
    """Ids need no tokenizer; one that spells them helps, where the vocabulary has one."""
    try:
        return text_tokenizer(None, vocab_size)
    except TokenizerError:
        return None


def _model(source: Source, origin: Source, weights: str | None, seed: int) -> Transformer:
    if origin is not source:
        return origin.model()
    if weights is None:
        return source.model(seed=seed)
    from blockspec.assembly.assemble import build_unfilled

    model = build_unfilled(source.spec, registry=source.registry)  # the file fills every tensor, or is refused
    _refuse_hugging_face_file(weights, model)
    load_weights(model, weights)
    return model


def _checkpoint_of_same_model(path: str, source: Source) -> Source:
    """A checkpoint given as the weights of ``source``'s model: what a user who trained CKPT from SPEC means;
    accepted when CKPT's model is SPEC's (the name aside), and loaded through the verified loader."""
    from blockspec.spec.convert import spec_to_dict

    checkpoint = open_source(path, source.registry)

    def shape(of) -> dict:
        document = spec_to_dict(of)
        document.get("model", {}).pop("name", None)
        return document

    if shape(checkpoint.spec) != shape(source.spec):
        raise CheckpointError(Problem(
            path="weights", message=f"{path} is a checkpoint of {checkpoint.spec.model.name!r}, a different model "
            f"than SPEC's {source.spec.model.name!r}", hint=f"trace the checkpoint itself: blockspec trace {path} ..."))
    return checkpoint


def _refuse_hugging_face_file(path: str, model: Transformer) -> None:
    """A Hugging Face weights file names its tensors its own way: one line that says so, not one per tensor."""
    from blockspec.checkpoint.safetensors_file import read_header
    from blockspec.interop.families import FAMILIES

    try:
        names = list(read_header(Path(path)).entries) if Path(path).is_file() else []
    except CheckpointError:
        return  # not readable: load_weights says how
    if not names or set(names) & set(model.state_dict()):
        return
    if any(re.match(family.layer_index, family.normalize_name(name)) for family in FAMILIES for name in names):
        raise CheckpointError(Problem(
            path="weights", message=f"{path} is a Hugging Face weights file (tensor names like {sorted(names)[0]!r})",
            hint="pass its folder, with its config.json, as SPEC, or turn it into a checkpoint with "
                 "blockspec import-hf FOLDER --out CKPT"))


def label_of(tokenizer: Tokenizer | None, token_id: int) -> str:
    """A printable spelling of one token id (the id itself without a tokenizer)."""
    if tokenizer is None:
        return str(token_id)
    text = tokenizer.decode([token_id]) if 0 <= token_id < tokenizer.vocab_size else ""
    if not text:
        return f"<{token_id}>"  # outside what the tokenizer can spell (a model's vocabulary may be larger)
    return text if text.isprintable() else repr(text)[1:-1]


def next_tokens(result: Trace, subject: Subject, k: int) -> list[dict]:
    """The k most likely next tokens after the last input token."""
    if "logits" not in result.names():
        return []
    probs = result["probs"].tensor[0, -1]  # (|V|,)
    values, indices = probs.topk(min(k, probs.shape[-1]))
    return [{"id": int(i), "token": label_of(subject.tokenizer, int(i)), "p": float(v)}
            for v, i in zip(values, indices)]
