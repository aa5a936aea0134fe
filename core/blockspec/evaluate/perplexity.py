"""Scoring windows through a model: the summed negative log-likelihood of every scored token, and its figures.

Batches of windows come from ``evaluate.windows.batches`` as the text is read, one array each (a batch
holds windows of one length: only a text's last window, or the one of a text shorter than the context, is
shorter); they go through the model under ``torch.inference_mode`` with the model in eval mode. The sum is kept in
float64 on the device (float32 on MPS, which has no float64), so scoring waits on the device only at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import math

import torch
import torch.nn.functional as F
from attrs import asdict, frozen

from blockspec.data.measure import TextSize, bits_per_byte, bits_per_character
from blockspec.evaluate.windows import Batch
from blockspec.modules.transformer import Transformer
from blockspec.generation.tokens import eval_mode, head_promises

__all__ = ["Perplexity", "Scored", "score_batches"]


@frozen
class Scored:
    """Σ −ln p(token) over ``tokens`` scored tokens."""

    nats: float
    tokens: int


@frozen(kw_only=True)
class Perplexity:
    """What ``evaluate_text`` measured on held-out text, and the settings it measured with."""

    tokens: int  # tokens scored: every token of each text but its first
    bytes: int  # the texts' UTF-8 bytes
    characters: int  # the texts' characters (Unicode code points)
    loss: float  # nats per scored token
    perplexity: float  # exp(loss)
    bits_per_byte: float
    bits_per_character: float
    context: int
    stride: int
    batch_size: int
    texts: int  # files (or prepared splits) scored separately and summed

    @classmethod
    def of(cls, scored: Scored, size: TextSize, **settings: int) -> Perplexity:
        loss = scored.nats / scored.tokens
        return cls(tokens=scored.tokens, bytes=size.bytes, characters=size.characters, loss=loss,
                   perplexity=math.exp(loss), bits_per_byte=bits_per_byte(scored.nats, size),
                   bits_per_character=bits_per_character(scored.nats, size), **settings)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def score_batches(model: Transformer, batches: Iterable[Batch], *,
                  after_batch: Callable[[int], None] | None = None) -> Scored:
    """The summed nats of the scored targets of ``batches``; ``after_batch(tokens)`` after each batch."""
    device = next(model.parameters()).device
    parts: list[torch.Tensor] = []  # each batch's 0-d sum, added up once at the end
    count = 0
    with eval_mode(model), torch.inference_mode():
        for batch in batches:
            parts.append(_batch_nats(model, batch, device))
            count += batch.tokens
            if after_batch is not None:
                after_batch(batch.tokens)
        total = _sum(parts, device)
    return Scored(nats=total, tokens=count)


def _sum(parts: list[torch.Tensor], device: torch.device) -> float:
    """The batches' float32 sums added in float64 (float32 on MPS, which has no float64), in one call."""
    if not parts:
        return 0.0
    return float(torch.stack(parts).to(torch.float32 if device.type == "mps" else torch.float64).sum())


def _batch_nats(model: Transformer, batch: Batch, device: torch.device) -> torch.Tensor:
    """The summed nats of one batch's scored targets, a 0-d tensor on ``device``.

    Every window after a text's first scores the same last positions, so the loss is taken over those
    alone; a batch whose windows start scoring at different places masks instead. An "lm" head, which works
    position by position, sees the scored positions alone (``_head_nats``), unless their logits fit in one
    piece and every position is scored: then the model's own output is scored, a few tensor operations fewer."""
    ids = torch.from_numpy(batch.ids).to(device)  # (B, T + 1)
    start, vocab = batch.start, model.embedding.num_embeddings
    in_one_piece = start == 0 and batch.tokens <= _piece_rows(device, vocab)
    if start is not None and not in_one_piece and "lm" in head_promises(model):
        features = model(ids[:, :-1], features_only=True)[:, start:].flatten(0, 1)  # (B, T, d) -> (B·(T - s), d)
        return _head_nats(model, features, ids[:, start + 1:].flatten(), vocab)  # targets (B·(T - s),)
    logits = model(ids[:, :-1])  # (B, T, |V|)
    if start is not None:
        tail = logits[:, start:].flatten(0, 1).float()  # (B·(T - start), |V|)
        return F.cross_entropy(tail, ids[:, start + 1:].flatten(), reduction="sum")
    nats = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")  # (B·T,)
    nats = nats.view(ids.shape[0], -1)  # (B, T)
    first = torch.from_numpy(batch.scored_from).to(device)  # (B,)
    scored = torch.arange(nats.shape[1], device=device)[None, :] >= first[:, None]  # (B, T)
    return (nats * scored).sum()


def _head_nats(model: Transformer, features: torch.Tensor, targets: torch.Tensor, vocab: int) -> torch.Tensor:
    """Σ −ln p(target) of features (M, d) through the model's "lm" head: a slice of the vocabulary at a time
    when the head promises ``logit_columns`` (and its module, not wrapped by an adapter, has them), else a
    piece of the positions at a time."""
    head = model.head
    if "logit_columns" in head_promises(model) and hasattr(head, "logit_columns"):
        return sum((_sliced_nats(head, rows, wanted, vocab)
                    for rows, wanted in zip(features.split(SLICE_ROWS), targets.split(SLICE_ROWS))),
                   features.new_zeros((), dtype=torch.float32))
    return _piecewise_nats(head, features, targets, vocab)


SLICE_BYTES = {"cpu": 4 << 20}  # one slice's logits on the CPU: its log-sum-exp reads them from the cache
DEVICE_SLICE_BYTES = 1 << 30  # elsewhere slices only bound the memory the logits take
SLICE_COLUMNS = 256  # but no thinner: a narrower matmul loses more than the cache saves
SLICE_ROWS = 4096  # positions scored together, so that a slice of SLICE_COLUMNS stays near SLICE_BYTES


def _sliced_nats(head: torch.nn.Module, features: torch.Tensor, targets: torch.Tensor, vocab: int) -> torch.Tensor:
    """Σ −ln p(target), features (M, d) and targets (M,): ln Σ exp(logits) folded slice by slice of the
    vocabulary (``head.logit_columns``), and each target's logit taken from the slice that holds it. The
    head's matrix is read once and no (M, |V|) logits are held.

    Measured on the CPU, 2 threads, 2,048 positions: llama-small's head (d 256, 32,000 tokens) and the loss
    took 335 ms in slices of 512 tokens, what the head alone takes (333 ms), against 429 ms for the whole output
    then its cross-entropy (and 515 ms in pieces of 128 positions); GPT-2's (d 768, 50,257 tokens) 1.23 s, less
    than the head alone (1.42 s, which writes all the logits to memory), against 1.60 s (1.96 s in pieces)."""
    kind = features.device.type
    columns = max(SLICE_COLUMNS, SLICE_BYTES.get(kind, DEVICE_SLICE_BYTES) // (4 * max(len(features), 1)))
    total = features.new_full((len(features),), float("-inf"), dtype=torch.float32)  # (M,) ln Σ exp so far
    picked = features.new_zeros((len(features),), dtype=torch.float32)  # (M,) each target's logit
    for begin in range(0, vocab, columns):
        end = min(begin + columns, vocab)
        logits = head.logit_columns(features, begin, end).float()  # (M, end - begin)
        total = torch.logaddexp(total, torch.logsumexp(logits, dim=-1))
        inside = (targets >= begin) & (targets < end)  # (M,)
        at = (targets - begin).clamp(0, end - begin - 1)[:, None]  # (M, 1) the target's column in the slice
        picked = picked + torch.where(inside, logits.gather(1, at)[:, 0], 0.0)
    return (total - picked).sum()


PIECE_BYTES = {"cpu": 8 << 20}  # logits per piece: on the CPU a piece's cross-entropy reads them from the cache
DEVICE_PIECE_BYTES = 1 << 30  # elsewhere pieces only bound the memory the logits take
PIECE_ROWS = {"cpu": 128}  # but no fewer positions: a thinner matmul loses more than the cache saves


def _piece_rows(device: torch.device, vocab: int) -> int:
    """How many positions' logits one piece holds on ``device``."""
    kind = device.type
    return max(PIECE_ROWS.get(kind, 1), PIECE_BYTES.get(kind, DEVICE_PIECE_BYTES) // (4 * vocab))


def _piecewise_nats(head: torch.nn.Module, features: torch.Tensor, targets: torch.Tensor, vocab: int) -> torch.Tensor:
    """Σ −ln p(target) over positions, features (M, d) and targets (M,), the head applied a piece at a time.

    Measured on the CPU, 2 threads, 4,096 positions: with llama-small's head (d 256, 32,000 tokens) the head
    and cross-entropy in pieces of 128 positions took 0.31 s, what the head alone takes, against 0.49 s for the
    whole output then its cross-entropy; with GPT-2's (d 768, 50,257 tokens) 1.29 s against 1.46 s (the head
    alone 1.16 s). Pieces of 32 or 512 positions were slower than either."""
    rows = _piece_rows(features.device, vocab)
    if len(features) <= rows:  # one piece, its sum the total: no splitting, no running sum
        return F.cross_entropy(head(features[None])[0].float(), targets, reduction="sum")  # (1, M, d) -> (M, |V|)
    total = features.new_zeros((), dtype=torch.float32)
    for piece, wanted in zip(features.split(rows), targets.split(rows)):
        logits = head(piece[None])[0].float()  # (m, d) -> (1, m, d) -> (1, m, |V|) -> (m, |V|)
        total = total + F.cross_entropy(logits, wanted, reduction="sum")
    return total
