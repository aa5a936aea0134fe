"""One table of rules maps weights both ways, so import and export cannot drift apart.

A rule says: the blockspec tensor ``target`` is the concatenation, along dim 0, of the
Hugging Face tensors ``sources`` (in that order), each transposed first if ``transpose``
(GPT-2's Conv1D stores (in, out)). Export splits by the recorded ``sizes``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch
from attrs import frozen


@frozen(kw_only=True)
class Rule:
    target: str
    sources: tuple[str, ...]
    sizes: tuple[int, ...] = ()  # dim-0 size of each source's part of target; () for one source
    transpose: bool = False


def same(target: str, source: str, *, transpose: bool = False) -> Rule:
    return Rule(target=target, sources=(source,), transpose=transpose)


def stacked(target: str, sources: Iterable[str], sizes: Iterable[int]) -> Rule:
    return Rule(target=target, sources=tuple(sources), sizes=tuple(sizes))


def to_blockspec(rules: Iterable[Rule], read: Callable[[str], torch.Tensor]) -> dict[str, torch.Tensor]:
    """Hugging Face tensors (by name, through ``read``) -> blockspec tensors."""
    state = {}
    for rule in rules:
        parts = [read(name) for name in rule.sources]
        tensor = torch.cat(parts, dim=0) if len(parts) > 1 else parts[0]
        state[rule.target] = tensor.t() if rule.transpose else tensor  # Conv1D (in, out) -> Linear (out, in)
    return state


def to_hf(rules: Iterable[Rule], state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """blockspec tensors -> Hugging Face tensors, each its own contiguous copy (safetensors needs that)."""
    tensors = {}
    for rule in rules:
        tensor = state[rule.target]
        tensor = tensor.t() if rule.transpose else tensor  # Linear (out, in) -> Conv1D (in, out)
        parts = tensor.split(list(rule.sizes), dim=0) if rule.sizes else (tensor,)
        for name, part in zip(rule.sources, parts, strict=True):
            tensors[name] = part.detach().clone(memory_format=torch.contiguous_format)
    return tensors


def hf_shapes(rules: Iterable[Rule], state: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    """The shape each Hugging Face tensor must have for this model (works on the meta device)."""
    return {name: tuple(t.shape) for name, t in to_hf(rules, state).items()}


def origin(rules: Iterable[Rule]) -> dict[str, str]:
    """Hugging Face name -> the blockspec tensor it feeds, for error messages."""
    return {source: rule.target for rule in rules for source in rule.sources}
