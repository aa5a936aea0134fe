"""The memory a command will need, estimated on the meta device before anything is allocated, against what
the machine has: a model too large is refused in one line naming what sizes it, not failed in a component.

An estimate, not a measurement (docs/reliability.md, "Memory before allocation"):

- weights: the parameters' and buffers' bytes of the model built on the meta device (exact);
- training: gradients (one more copy of the parameters) and AdamW's two moments (two more); activations:
  the bytes autograd saves for the backward pass, measured on the meta device for one sequence at three
  short lengths, extrapolated as a quadratic in the length (attention's scores grow with its square) to
  the context length, times the micro-batch;
- inference: the KV cache, sized on the meta device by the cache's own rule, and the largest working
  tensors of one forward pass (attention scores and logits) from the spec;
- a trace (``blockspec.inspect``): every stage it keeps, measured as activations are.

Left out: the allocator's fragmentation, torch's own workspaces and mixed precision's savings. A run
the estimate passes near the limit may still fail; ``memory_check=False`` (``--no-memory-check``)
skips the refusal of one that would fit.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path

import torch
import torch.nn.functional as F
from attrs import field, frozen

from blockspec.modules.adapter import adapter_state
from blockspec.assembly.assemble import build
from blockspec.errors import BlockspecError, Problem
from blockspec.modules.kv_cache import KVCache
from blockspec.modules.transformer import Transformer
from blockspec.registry.components import Registry
from blockspec.spec.schema import ModelSpec

ADAMW_STATES = 2  # exp_avg and exp_avg_sq, each the parameters' size
FLOAT_BYTES = 4  # the estimate is in float32, as the trainer keeps its weights
FIT_LENGTHS = (2, 3, 4)  # measured lengths; a quadratic through them gives any other
WEIGHTS_HINT = "use smaller [model] sizes (d_model, d_ff, n_layers, vocab_size)"
MEMORY_NAMES = {"memory_check": "memory_check=False"}


class MemoryEstimateError(BlockspecError, ValueError):
    """What a command would allocate is more than the machine has: a size chosen too large (not a MemoryError,
    which says an allocation failed; this one refuses before any)."""


@frozen(kw_only=True)
class Part:
    """One share of an estimate, and what to change to shrink it (``{name}`` slots: ``names``)."""

    what: str
    bytes: int
    shrink: str = WEIGHTS_HINT
    names: Mapping[str, str] = field(factory=dict)


@frozen(kw_only=True)
class MemoryEstimate:
    parts: tuple[Part, ...]

    @property
    def total(self) -> int:
        return sum(part.bytes for part in self.parts)


# ---------------------------------------------------------------- what the machine has


def available_memory(device: torch.device) -> tuple[int, str]:
    """Bytes free for this process on ``device``, and where that was read (named in a refusal)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free, f"{device} has"
    found = [(_meminfo_available(), "the machine has"), (_cgroup_headroom(), "this process's cgroup allows"),
             (_address_space_headroom(), "this process's address-space limit (ulimit -v) leaves")]
    return min(((n, where) for n, where in found if n is not None), default=(_sysconf_available(), "the machine has"))


def _meminfo_available() -> int | None:
    """MemAvailable: free memory plus what the kernel can reclaim at once (page cache)."""
    try:
        lines = Path("/proc/meminfo").read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    kib = next((line.split()[1] for line in lines if line.startswith("MemAvailable:")), None)
    return None if kib is None else int(kib) * 1024


def _sysconf_available() -> int:
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _cgroup_headroom() -> int | None:
    """A container's limit (cgroup v2) less what it uses; None without one."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text(encoding="ascii").strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text(encoding="ascii").strip()
    except OSError:
        return None
    return None if limit == "max" else max(int(limit) - int(used), 0)


def _address_space_headroom() -> int | None:
    """RLIMIT_AS less this process's virtual size; None without a limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        status = Path("/proc/self/status").read_text(encoding="ascii").splitlines()
    except OSError:
        return soft
    vm = next((int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:")), 0)
    return max(soft - vm, 0)


# ---------------------------------------------------------------- the refusal


def check_fits(estimate: MemoryEstimate, device: torch.device | str, *, doing: str, source: str | None) -> None:
    """Refuse, naming the largest share's size and what shrinks it, what ``device`` cannot hold."""
    have, where = available_memory(torch.device(device))
    if estimate.total <= have:
        return
    largest = max(estimate.parts, key=lambda part: part.bytes)
    shares = ", ".join(f"{part.what} {gib(part.bytes)}" for part in estimate.parts if part.bytes)
    raise MemoryEstimateError(Problem(
        file=source, message=f"{doing} needs about {gib(estimate.total)} of memory ({shares}), but {where} "
        f"{gib(have)} available", hint=f"the largest share, {largest.what}, shrinks if you {largest.shrink}; "
        "or pass {memory_check} to try anyway", names={**MEMORY_NAMES, **largest.names}))


def gib(n: int) -> str:
    """Bytes in the unit that reads best: MiB, GiB or TiB."""
    unit, scale = next((u, s) for u, s in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)) if n >= s / 8 or u == "MiB")
    return f"{n / scale:,.1f} {unit}"


# ---------------------------------------------------------------- estimates


def meta_model(spec: ModelSpec, registry: Registry | None) -> Transformer:
    """The spec's model on the meta device: every shape, no memory."""
    return build(spec, registry=registry, device="meta")


def weight_bytes(model: Transformer) -> int:
    """Parameters (each once, a tied head included) and buffers, as float32."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() for t in tensors) * FLOAT_BYTES


def training_estimate(spec: ModelSpec, registry: Registry | None, *, micro_batch: int,
                      shards: int = 1) -> MemoryEstimate:
    """Weights, gradients, AdamW's state (each divided over ``shards`` when sharded) and one micro-batch's
    activations at the context length. With [[adapters]] only the adapters have gradients and state."""
    model = meta_model(spec, registry).train()
    weights = weight_bytes(model) // shards
    trainable = adapter_state(model).values() if spec.adapters else model.parameters()
    parameters = sum(p.numel() for p in trainable) * FLOAT_BYTES // shards
    activations = micro_batch * fitted(lambda n: saved_bytes(model, n), spec.model.context_length)
    return MemoryEstimate(parts=(
        Part(what="weights", bytes=weights), Part(what="gradients", bytes=parameters),
        Part(what="optimizer state", bytes=ADAMW_STATES * parameters),
        Part(what="activations", bytes=activations, names={"batch_size": "batch_size"},
             shrink="lower {batch_size} or [model] context_length")))


def generation_estimate(model: Transformer, *, batch: int, queries: int, length: int,
                        cached: bool) -> MemoryEstimate:
    """Beyond ``model``'s weights (held already): a KV cache of ``length`` positions when ``cached``, and the
    attention scores and logits of a forward pass of ``queries`` positions over ``length``."""
    held = batch * _cache_bytes(model, length) if cached else 0
    config = model.spec.model
    working = 2 * FLOAT_BYTES * batch * queries * (config.n_heads * length + config.vocab_size)
    tokens = {"max_new_tokens": "max_new_tokens"}
    return MemoryEstimate(parts=(
        Part(what="KV cache", bytes=held, names=tokens, shrink="lower {max_new_tokens}"),
        Part(what="attention scores and logits", bytes=working, names=tokens,
             shrink="use a shorter prompt or lower {max_new_tokens}")))


def evaluation_estimate(model: Transformer, *, batch: int, length: int) -> MemoryEstimate:
    """Beyond ``model``'s weights (held already): the attention scores and logits of ``batch`` windows of
    ``length`` positions, with the log-probabilities scoring takes of the logits."""
    config = model.spec.model
    working = 2 * FLOAT_BYTES * batch * length * (config.n_heads * length + config.vocab_size)
    return MemoryEstimate(parts=(
        Part(what="attention scores and logits", bytes=working, names={"batch_size": "batch_size", "context": "context"},
             shrink="lower {batch_size} or {context}"),))


def _cache_bytes(model: Transformer, length: int) -> int:
    cache = KVCache.for_model(model, batch_size=1, max_length=length, device="meta")  # shapes only
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


def saved_bytes(model: Transformer, length: int) -> int:
    """What autograd keeps for the backward pass of one (1, ``length``) sequence and its loss, on the meta device.

    Tensors saved twice, or as views of one tensor, count once; the parameters, which the weights hold
    already, not at all."""
    ids = torch.zeros((1, length), dtype=torch.long, device="meta")
    own = {id(p) for p in model.parameters()}
    kept: dict[int, torch.Tensor] = {}

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        base = tensor if tensor._base is None else tensor._base
        if id(base) not in own:
            kept[id(base)] = base  # held, so no id is reused while measuring
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        logits = model(ids)  # (1, N, |V|)
        F.cross_entropy(logits.float().flatten(0, 1), ids.flatten())  # (N, |V|) vs (N,)
    return sum(t.numel() * t.element_size() for t in kept.values())


def fitted(measure: Callable[[int], int], length: int, lengths: Sequence[int] = FIT_LENGTHS) -> int:
    """``measure(length)``, extrapolated from ``measure`` at ``lengths`` as a quadratic (measured when short)."""
    if length <= max(lengths):
        return measure(length)
    (x0, x1, x2), (y0, y1, y2) = lengths, [measure(n) for n in lengths]
    terms = (Fraction(y0 * (length - x1) * (length - x2), (x0 - x1) * (x0 - x2)),  # Lagrange's form, exact
             Fraction(y1 * (length - x0) * (length - x2), (x1 - x0) * (x1 - x2)),
             Fraction(y2 * (length - x0) * (length - x1), (x2 - x0) * (x2 - x1)))
    return max(round(sum(terms)), 0)
