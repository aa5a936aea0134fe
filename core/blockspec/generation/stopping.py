"""When a row of a batch stops: an end-of-text or listed stop id, a stop string, or ``max_new_tokens``.

The positions are Hugging Face's (``EosTokenCriteria``, ``StopStringCriteria``): a row ends with the
token that completes its stop, which is kept. A stop string is matched on the decoded *generated*
text, so one split over two tokens stops at the token that completes it. Unlike Hugging Face, whose
criterion reads the whole sequence, text of the prompt never counts: a stop string that begins in the
prompt and ends in the first new token does not stop the row (the prompt is the caller's, the stop is
about what the model says).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch

from blockspec.data.tokenizer import Tokenizer, end_of_text
from blockspec.errors import InputError, Problem

StopReason = Literal["eos", "stop", "length"]
Decode = Callable[[list[int]], str]


def end_of_text_id(tokenizer: Tokenizer) -> int | None:
    """The id of the tokenizer's end-of-text token (``end_of_text``, the one rule), or None when it has none."""
    name = end_of_text(tokenizer)  # type: ignore[arg-type]  # any tokenizer: only an HFTokenizer names one
    return None if name is None else tokenizer.special_tokens[name]  # type: ignore[attr-defined]


class StopConditions:
    """Per row of a batch, whether it has finished; a finished row repeats its pad token from then on."""

    def __init__(self, batch: int, *, stop_ids: Sequence[int] = (), stop_strings: Sequence[str] = (),
                 decode: Decode | None = None, device: torch.device | None = None) -> None:
        check_stops(stop_ids, stop_strings, decode)
        self.stop_ids = torch.tensor(list(dict.fromkeys(stop_ids)), dtype=torch.long, device=device)  # (S,), in order
        self.stop_strings, self.decode = tuple(stop_strings), decode
        self.finished = torch.zeros(batch, dtype=torch.bool, device=device)  # (B,)
        self.pad = torch.zeros(batch, dtype=torch.long, device=device)  # (B,): what a finished row repeats
        self.generated: list[list[int]] = [[] for _ in range(batch)]  # kept only for stop strings

    @property
    def active(self) -> bool:
        """Whether any condition can stop a row early (otherwise the loop needs no per-step check)."""
        return bool(self.stop_ids.numel() or self.stop_strings)

    def all_finished(self) -> bool:
        return bool(self.finished.all())

    def step(self, token: torch.Tensor) -> torch.Tensor:
        """A step's sampled tokens (B,) -> the tokens kept (B,): finished rows get their pad; then mark new stops."""
        token = torch.where(self.finished, self.pad, token)  # (B,)
        done = torch.isin(token, self.stop_ids) | self._string_stops(token)  # (B,)
        newly = done & ~self.finished
        self.pad = torch.where(newly, self._pad_for(token), self.pad)
        self.finished |= done
        return token

    def _pad_for(self, token: torch.Tensor) -> torch.Tensor:
        """The first stop id (the end-of-text, as the text layer lists it) pads, else the row's last token."""
        return self.stop_ids[:1].expand_as(token) if self.stop_ids.numel() else token  # (B,)

    def _string_stops(self, token: torch.Tensor) -> torch.Tensor:
        """(B,) whether each unfinished row's generated text now holds a stop string (it did not before)."""
        hits = [False] * len(self.generated)
        if not self.stop_strings or self.decode is None:
            return torch.tensor(hits, device=token.device)
        for row, new in enumerate(token.tolist()):
            if not bool(self.finished[row]):
                self.generated[row].append(new)
                text = self.decode(self.generated[row])
                hits[row] = any(stop in text for stop in self.stop_strings)
        return torch.tensor(hits, device=token.device)


def until_stop(new_ids: Sequence[int], *, stop_ids: Sequence[int] = (), stop_strings: Sequence[str] = (),
               decode: Decode | None = None) -> list[int]:
    """One row of a batch's new ids up to its stop (kept), as ``StopConditions`` ended it: the rest is its pad."""
    for end in range(1, len(new_ids) + 1):
        if new_ids[end - 1] in stop_ids or (stop_strings and decode is not None and any(
                stop in decode(list(new_ids[:end])) for stop in stop_strings)):
            return list(new_ids[:end])
    return list(new_ids)


def check_stops(stop_ids: Sequence[int], stop_strings: Sequence[str], decode: Decode | None) -> None:
    """Stop strings need text (a ``decode``) and each at least one character; stop ids are integers."""
    if any(isinstance(i, bool) or not isinstance(i, int) for i in stop_ids):
        raise InputError(Problem(path="stop_ids", expected="integer token ids", found=repr(list(stop_ids))))
    if any(not isinstance(s, str) or not s for s in stop_strings):
        raise InputError(Problem(path="stop_strings", expected="texts of at least one character",
                                 found=repr(list(stop_strings))))
    if stop_strings and decode is None:
        raise InputError(Problem(path="decode", message="stop strings are matched on text, and no decode was given",
                                 hint="give decode=tokenizer.decode"))


def stop_reason(new_ids: Sequence[int], *, eos_id: int | None, stop_ids: Sequence[int] = (),
                stop_strings: Sequence[str] = (), decode: Decode | None = None) -> StopReason:
    """Why one row's new ids end where they do: its end-of-text, another stop, or the token budget."""
    last = new_ids[-1] if new_ids else None
    if last is not None and last == eos_id:
        return "eos"
    if last is not None and last in stop_ids:
        return "stop"
    if stop_strings and decode is not None and any(stop in decode(list(new_ids)) for stop in stop_strings):
        return "stop"
    return "length"


def unproducible(stop: str, tokenizer: Tokenizer) -> str | None:
    """The characters of ``stop`` a character tokenizer has no token for (it can never stop), or None."""
    chars = getattr(tokenizer, "chars", None)  # only a CharTokenizer lacks characters; a byte-level BPE has all
    missing = None if chars is None else sorted(set(stop) - set(chars))
    return "".join(missing) if missing else None
