"""Build one component in isolation and feed it the inputs its kind receives inside a model.

Imports no hypothesis: the load-time probe runs the ``contract`` properties through this
harness on one fixed case, where hypothesis may not be installed.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from attrs import frozen
from torch import nn

from blockspec.assembly.context import BuildContext
from blockspec.modules.positional import PositionalEncoding
from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.errors import NotApplicable


PER_LAYER = ("block", "ffn", "attention")  # the kinds built with a layer factory (ctx.layer: index, dropout)
ADAPTER = "adapter"  # the kind built around a linear layer (``ctx.target``)


@frozen
class Built:
    """A freshly built component, and the embedding its BuildContext offered (heads may tie to it).

    ``base``: for an adapter, an untouched copy of the linear layer it was given (None for other kinds);
    ``given``: the ids of that layer's own parameters, which the adapter holds (as ``base_layer``'s).
    """

    module: nn.Module
    embedding: nn.Embedding
    base: nn.Linear | None = None
    given: frozenset[int] = frozenset()
    layer: StandInLayer | None = None  # a block's or FFN's ctx.layer: what it built, by name


def adapter_target(case: Case) -> nn.Linear:
    """The linear layer an adapter is built around: d_model in, d_ff + 1 out (rectangular), each side widened
    to the config's ``rank`` where it is smaller, so every drawn rank fits. Drawn from the current seed."""
    rank = getattr(case.config, "rank", 1)
    rank = rank if isinstance(rank, int) else 1
    return nn.Linear(max(case.model.d_model, rank), max(case.model.d_ff, rank) + 1, bias=case.model.bias)


class Zero(nn.Module):
    """A sublayer that outputs zeros shaped like its input: what the ``residual`` promise is checked with."""

    def forward(self, x: torch.Tensor, *args: Any) -> torch.Tensor:
        return torch.zeros_like(x)


class StandInLayer:
    """``ctx.layer`` for a block or FFN built alone, as the case draws it: its ``index``, the spec's [model]
    ``dropout``, norms and activation built from the drawn installed components (their default configs; the
    kit's reference LayerNorm and GELU where the case has none, as in the load-time probe), the core's causal
    attention and a dense FFN of the drawn activation; ``Zero`` attention and FFN when ``zero``.

    ``made`` records each sublayer it built under the name it was asked for, so a property can compare a block
    against its promised wiring with the very modules the layer gave it.
    """

    def __init__(self, ctx: BuildContext, case: Case | None = None, *, zero: bool = False) -> None:
        self._ctx, self._zero = ctx, zero
        self._norm, self._activation = (case.norm, case.activation) if case is not None else (None, None)
        self.index = case.layer_index if case is not None else 0
        self.dropout = ctx.model.dropout
        self.made: dict[str, nn.Module] = {}

    def attention(self, name: str = "attn") -> nn.Module:
        from blockspec.testing.reference import partner

        return self._record(name, Zero() if self._zero else partner("attention").build(None, self._ctx))

    def ffn(self, name: str = "ffn") -> nn.Module:
        from blockspec.modules.feed_forward import FeedForward

        m = self._ctx.model
        made = Zero() if self._zero else FeedForward(d_model=m.d_model, d_ff=m.d_ff, activation=self.activation(),
                                                     bias=m.bias)
        return self._record(name, made)

    def norm(self, name: str) -> nn.Module:
        return self._record(name, self._partner("norm", self._norm))

    def activation(self, name: str = "act") -> nn.Module:
        return self._record(name, self._partner("activation", self._activation))

    def _partner(self, kind: str, drawn: Component | None) -> nn.Module:
        from blockspec.testing.reference import partner

        component = partner(kind) if drawn is None else drawn
        return component.build(component.config_cls(), self._ctx)

    def _record(self, name: str, module: nn.Module) -> nn.Module:
        self.made[name] = module
        return module


def build_isolated(component: Component, case: Case, *, seed: int | None = None, device: str = "cpu",
                   zero_sublayers: bool = False) -> Built:
    """``component.build(config, ctx)`` under a fixed torch seed, in the case's dtype, on ``device``.

    A block, FFN or attention gets a ``StandInLayer`` as ``ctx.layer``, as the layer at the case's ``layer_index``
    (``zero_sublayers``: Zero attention and FFN), as each gets its layer's factory in a model.
    """
    with torch.random.fork_rng(devices=[]), torch.device(device):
        _seed(case.seed if seed is None else seed, device)
        embedding = nn.Embedding(case.model.vocab_size, case.model.d_model)
        ctx = BuildContext(model=case.model, embedding=embedding)
        target = adapter_target(case) if component.kind == ADAPTER else None
        base = copy.deepcopy(target)
        given = frozenset(id(p) for p in target.parameters()) if target is not None else frozenset()
        layer = StandInLayer(ctx, case, zero=zero_sublayers) if component.kind in PER_LAYER else None
        if layer is not None:
            ctx = BuildContext(model=case.model, embedding=embedding, layer=layer)
        elif target is not None:
            ctx = BuildContext(model=case.model, embedding=embedding, target=target)
        module = component.build(case.config, ctx)
    if not isinstance(module, nn.Module):
        raise AssertionError(f"build returned {type(module).__name__}, not an nn.Module")
    if case.trained:
        perturb(module, case.seed if seed is None else seed)
    dtype = dtype_of(case)
    base = base.to(dtype=dtype).eval() if base is not None else None
    return Built(module.to(dtype=dtype).eval(), embedding.to(dtype=dtype), base, given, layer)


PERTURBATION = 0.5  # the noise's std, as a fraction of each tensor's root mean square ...
PERTURBATION_FLOOR = 0.2  # ... or of this, for tensors that start small or at zero (biases, zero-init tables)


def perturb(module: nn.Module, seed: int) -> None:
    """Move every floating parameter and persistent buffer by seeded Gaussian noise, as training would.

    A promise must hold for every value of the parameters: a table that starts at zero, gains that start
    equal, or a ReZero α at 0 hide what a module does with the values training gives them. The noise's
    std is PERTURBATION·max(rms, PERTURBATION_FLOOR), so N(0, 0.02²) weights grow about five-fold and leaks
    grow with them. Non-persistent buffers are derived (rotary or sinusoidal tables) and stay as built.
    """
    gen = torch.Generator().manual_seed(seed + 104729)
    with torch.no_grad():
        for tensor in trained_state(module).values():
            if tensor.device.type == "meta":
                continue
            noise = torch.randn(tensor.shape, generator=gen, dtype=torch.float64)
            rms = tensor.double().pow(2).mean().sqrt().item() if tensor.numel() else 0.0
            std = PERTURBATION * max(rms, PERTURBATION_FLOOR)
            tensor.add_((std * noise).to(device=tensor.device, dtype=tensor.dtype))


def trained_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The floating tensors training or a checkpoint sets, by name: parameters and persistent buffers, each once.

    Non-persistent buffers (derived tables) are left out.
    """
    found: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for prefix, sub in module.named_modules():
        persistent = {n: b for n, b in sub._buffers.items() if n not in sub._non_persistent_buffers_set}
        for name, tensor in [*sub._parameters.items(), *persistent.items()]:
            if tensor is not None and tensor.is_floating_point() and id(tensor) not in seen:
                seen.add(id(tensor))
                found[f"{prefix}.{name}" if prefix else name] = tensor
    return found


@contextmanager
def one_thread() -> Iterator[None]:
    """The kit's tensors are tiny: one intra-op thread avoids waking a thread pool per operation.

    On a busy machine this makes the checks about ten times faster; the setting is restored after.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def assume(condition: bool, why: str) -> None:
    """Inside a hypothesis test, ``hypothesis.assume``: the case is no example. Outside (the probe's one
    fixed case), NotApplicable: the check cannot be made here. Never imports hypothesis itself."""
    if condition:
        return
    hypothesis = sys.modules.get("hypothesis")
    if hypothesis is not None and hypothesis.currently_in_test_context():
        hypothesis.assume(False)
    raise NotApplicable(why)


def _seed(seed: int, device: str) -> None:
    """torch.manual_seed also seeds every accelerator, lazily and slowly; on the CPU one generator suffices."""
    if torch.device(device).type in ("cpu", "meta"):
        torch.random.default_generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def dtype_of(case: Case) -> torch.dtype:
    return getattr(torch, case.dtype)


def generator(case: Case, offset: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(case.seed + offset)


def normal(case: Case, *shape: int, offset: int = 0, device: str = "cpu") -> torch.Tensor:
    """Standard normal inputs, reproducible from the case's seed, in its dtype."""
    values = torch.randn(*shape, generator=generator(case, offset), dtype=torch.float64)
    return values.to(device=device, dtype=dtype_of(case))


def activation_width(module: nn.Module, case: Case) -> int:
    """What the FFN feeds an activation: 2·d_ff when it says it is gated, d_ff otherwise."""
    return 2 * case.model.d_ff if getattr(module, "gated", False) else case.model.d_ff


def inputs(kind: str, module: nn.Module, case: Case, device: str = "cpu") -> tuple[torch.Tensor, ...]:
    """The tensors a component of ``kind`` receives, shaped as the model would pass them."""
    m, b, n = case.model, case.batch, case.tokens
    if kind == "activation":
        return (normal(case, b, n, activation_width(module, case), device=device),)
    if kind == "positional":
        q = normal(case, b, m.n_heads, n, m.head_dim, offset=1, device=device)  # (B, h, N, hs)
        k = normal(case, b, m.kv_heads, n, m.head_dim, offset=2, device=device)  # (B, kv, N, hs)
        return normal(case, b, n, m.d_model, device=device), q, k
    if kind == ADAPTER:
        return (normal(case, b, n, getattr(module, "in_features", m.d_model), device=device),)  # (B, N, in)
    return (normal(case, b, n, m.d_model, device=device),)  # norm, head, attention, block, ffn: (B, N, d)


def outputs(kind: str, module: nn.Module, case: Case, tensors: tuple[torch.Tensor, ...]) -> dict[str, Any]:
    """Run the component the way the model does; name each output."""
    with torch.no_grad():
        return forward(kind, module, case, tensors)


def forward(kind: str, module: nn.Module, case: Case, tensors: tuple[torch.Tensor, ...]) -> dict[str, Any]:
    """``outputs`` with autograd on: what a training step (or ``torch.compile``) runs."""
    if kind == "positional":
        return positional_outputs(module, case, *tensors)
    if kind in ("attention", "block"):
        return {"output": module(tensors[0], PositionalEncoding(), case.start)}
    return {"output": module(tensors[0])}


def positional_outputs(module: nn.Module, case: Case, x, q, k) -> dict[str, Any]:
    """Each hook the encoder says it uses: embed, rotate, score_bias (positions start..start+N-1)."""
    if not isinstance(module, PositionalEncoding):  # the model calls hooks only the base class defines
        raise AssertionError(f"{type(module).__name__} does not subclass PositionalEncoding")
    found: dict[str, Any] = {}
    start = clamp_start(module, case)
    if getattr(module, "adds", False):
        found["embed"] = module.embed(x, start)
    if getattr(module, "rotates", False):
        found["rotate.q"], found["rotate.k"] = module.rotate(q, k, start)
    if getattr(module, "biases", False):
        found["score_bias"] = module.score_bias(case.tokens, case.tokens, start)
    return found


def clamp_start(module: nn.Module, case: Case) -> int:
    """The case's first position, pulled back inside a bounded encoder's table."""
    limit = getattr(module, "max_positions", None)
    if limit is None:
        return case.start
    return max(0, min(case.start, limit - case.tokens))


def fits(module: nn.Module, case: Case) -> bool:
    """Whether the case's sequence fits a bounded encoder at all."""
    limit = getattr(module, "max_positions", None)
    return limit is None or case.tokens <= limit


def exercise(component: Component, case: Case, device: str = "cpu"):
    """Build, make inputs, run: (built, inputs, outputs).

    A sequence longer than a bounded encoder's table is not an example (hypothesis rejects it).
    """
    built = build_isolated(component, case, device=device)
    assume(fits(built.module, case), f"{case.tokens} tokens do not fit max_positions="
                                     f"{getattr(built.module, 'max_positions', None)}")
    tensors = inputs(component.kind, built.module, case, device)
    return built, tensors, outputs(component.kind, built.module, case, tensors)
