"""One table of rules maps weights both ways, so import and export cannot drift apart.

A rule says how the blockspec tensor ``target`` is made of the Hugging Face tensors ``sources``:

1. the sources are concatenated along dim 0, in order (export splits by the recorded ``sizes``);
2. with ``regroup = (a, b)``, dim 0 of that, seen as (a, b, rest), is reordered to (b, a, rest):
   GPT-NeoX keeps q, k, v per head, rows (heads, 3, head_dim), where blockspec's qkv is
   (3, heads, head_dim); with ``reorder``, dim 0 seen as len(reorder) equal blocks takes them in that
   order (Falcon's grouped q, q, ..., k, v per kv head -> blockspec's q | k | v);
3. the result is transposed if ``transpose`` (GPT-2's Conv1D stores (in, out); for a stacked 3-D source,
   its last two dims);
4. with ``interleave = dim``, the pairs Hugging Face interleaves along that dim (gpt-oss's gate_up:
   g0, u0, g1, u1, ...) become the two halves blockspec keeps (g0, g1, ..., u0, u1, ...);
5. with ``stack = n``, the sources are n equal groups, one after another, each made as above,
   and the n results are stacked along a new dim 0 (Mixtral's experts: w1, w3 of each expert
   -> blockspec's up (n_experts, 2·d_ff, d)).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch
from attrs import evolve, frozen


@frozen(kw_only=True)
class Rule:
    target: str
    sources: tuple[str, ...]
    sizes: tuple[int, ...] = ()  # dim-0 size of each source's part of a group; () for one source per group
    transpose: bool = False
    regroup: tuple[int, int] | None = None  # (a, b): HF rows (a, b, rest) are blockspec rows (b, a, rest)
    reorder: tuple[int, ...] = ()  # blockspec's dim-0 block j is HF's block reorder[j] (equal blocks); (): as is
    stack: int = 0  # > 0: that many groups of sources, stacked along a new dim 0
    interleave: int | None = None  # the dim (after any transpose) whose pairs HF interleaves and blockspec halves

    def __attrs_post_init__(self) -> None:
        if self.stack and len(self.sources) % self.stack:
            raise ValueError(f"{self.target}: {len(self.sources)} sources do not split into {self.stack} groups")

    def groups(self) -> list[tuple[str, ...]]:
        """The sources of each stacked slice (one group, all the sources, when nothing is stacked)."""
        if not self.stack:
            return [self.sources]
        per = len(self.sources) // self.stack
        return [self.sources[g * per:(g + 1) * per] for g in range(self.stack)]


def same(target: str, source: str, *, transpose: bool = False) -> Rule:
    return Rule(target=target, sources=(source,), transpose=transpose)


def stacked(target: str, sources: Iterable[str], sizes: Iterable[int]) -> Rule:
    return Rule(target=target, sources=tuple(sources), sizes=tuple(sizes))


def regrouped(target: str, source: str, groups: tuple[int, int]) -> Rule:
    """One source whose dim-0 blocks are ordered (a, b) where blockspec orders them (b, a)."""
    return Rule(target=target, sources=(source,), regroup=groups)


def reordered(target: str, source: str, order: Iterable[int]) -> Rule:
    """One source whose equal dim-0 blocks blockspec takes in ``order`` (block j of blockspec's = order[j])."""
    order = tuple(order)
    if sorted(order) != list(range(len(order))):
        raise ValueError(f"{target}: {order} is not an order of {len(order)} blocks")
    return Rule(target=target, sources=(source,), reorder=order)


def per_expert(target: str, sources: Iterable[Iterable[str]], sizes: Iterable[int] = ()) -> Rule:
    """Each expert's tensors (w1, w3 of one expert: a group), stacked along a new dim 0 by expert."""
    groups = [tuple(group) for group in sources]
    return Rule(target=target, sources=tuple(name for group in groups for name in group), sizes=tuple(sizes),
                stack=len(groups))


def interleaved(target: str, source: str, dim: int, *, transpose: bool = False) -> Rule:
    """One source whose pairs along ``dim`` (after the transpose) are blockspec's two halves, interleaved."""
    return Rule(target=target, sources=(source,), transpose=transpose, interleave=dim)


def _halves(tensor: torch.Tensor, dim: int, *, undo: bool = False) -> torch.Tensor:
    """Pairs interleaved along ``dim`` -> the two halves, one after the other (``undo``: back again)."""
    at = dim % tensor.dim()
    grouped = tensor.unflatten(at, (2, -1) if undo else (-1, 2))  # (..., n, 2, ...) or (..., 2, n, ...)
    return grouped.transpose(at, at + 1).flatten(at, at + 1)


def _swap_blocks(tensor: torch.Tensor, first: int, second: int) -> torch.Tensor:
    """Dim 0 seen as (first, second, rest) -> reordered (second, first, rest), flattened back."""
    blocks = tensor.unflatten(0, (first, second, -1))  # (first, second, rest, ...)
    return blocks.transpose(0, 1).flatten(0, 2)  # (second·first·rest, ...)


def _take_blocks(tensor: torch.Tensor, order: tuple[int, ...]) -> torch.Tensor:
    """Dim 0 seen as len(order) equal blocks -> those blocks in ``order``, flattened back."""
    blocks = tensor.unflatten(0, (len(order), -1))  # (blocks, rows per block, ...)
    return blocks[list(order)].flatten(0, 1)  # (rows, ...)


def _build(rule: Rule, parts: list[torch.Tensor]) -> torch.Tensor:
    """One group's HF tensors -> its blockspec tensor (steps 1-3 of the module docstring)."""
    tensor = torch.cat(parts, dim=0) if len(parts) > 1 else parts[0]
    if rule.regroup is not None:
        tensor = _swap_blocks(tensor, *rule.regroup)
    if rule.reorder:
        tensor = _take_blocks(tensor, rule.reorder)
    tensor = tensor.transpose(-2, -1) if rule.transpose else tensor  # Conv1D (in, out) -> Linear (out, in)
    return tensor if rule.interleave is None else _halves(tensor, rule.interleave)


def _unbuild(rule: Rule, tensor: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One group's blockspec tensor -> its HF tensors: ``_build`` undone."""
    tensor = tensor if rule.interleave is None else _halves(tensor, rule.interleave, undo=True)
    tensor = tensor.transpose(-2, -1) if rule.transpose else tensor  # Linear (out, in) -> Conv1D (in, out)
    if rule.reorder:
        tensor = _take_blocks(tensor, tuple(sorted(range(len(rule.reorder)), key=rule.reorder.__getitem__)))
    if rule.regroup is not None:
        first, second = rule.regroup
        tensor = _swap_blocks(tensor, second, first)
    return tensor.split(list(rule.sizes), dim=0) if rule.sizes else (tensor,)


def output_rows(rule: Rule, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A tensor indexed by the target's output features (a LoRA's B (out, r), a DoRA magnitude (out,)) -> one per
    Hugging Face source, split and reordered as the weight's rows are (a Conv1D's transpose leaves rows alone).

    ValueError for a rule whose sources do not each hold whole output rows (stacked experts, a transposed
    weight that is also split or regrouped)."""
    if rule.stack or rule.interleave is not None or rule.transpose and (rule.sizes or rule.regroup or rule.reorder):
        raise ValueError("its Hugging Face tensors do not hold whole output rows of it")
    return _unbuild(evolve(rule, transpose=False), rows)


def to_blockspec(rules: Iterable[Rule], read: Callable[[str], torch.Tensor]) -> dict[str, torch.Tensor]:
    """Hugging Face tensors (by name, through ``read``) -> blockspec tensors."""
    state = {}
    for rule in rules:
        built = [_build(rule, [read(name) for name in group]) for group in rule.groups()]
        state[rule.target] = torch.stack(built) if rule.stack else built[0]  # (stack, ...) or as built
    return state


def to_hf(rules: Iterable[Rule], state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """blockspec tensors -> Hugging Face tensors, each its own contiguous copy (safetensors needs that)."""
    tensors = {}
    for rule in rules:
        whole = state[rule.target]
        slices = whole.unbind(0) if rule.stack else (whole,)  # (stack, ...) -> stack tensors (...)
        for group, tensor in zip(rule.groups(), slices, strict=True):
            for name, part in zip(group, _unbuild(rule, tensor), strict=True):
                tensors[name] = part.detach().clone(memory_format=torch.contiguous_format)
    return tensors


def hf_shapes(rules: Iterable[Rule], state: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    """The shape each Hugging Face tensor must have for this model (works on the meta device)."""
    return {name: tuple(t.shape) for name, t in to_hf(rules, state).items()}


def origin(rules: Iterable[Rule]) -> dict[str, str]:
    """Hugging Face name -> the blockspec tensor it feeds, for error messages."""
    return {source: rule.target for rule in rules for source in rule.sources}
