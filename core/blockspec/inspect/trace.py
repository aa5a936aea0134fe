"""Follow one input through an assembled model: every stage, named, with its shape and maker.

The tracer runs the model's real ``forward`` once and records what its modules show
through taps (``blockspec.modules.taps``): each ``tap(module, name, x)`` becomes the stage
``<module path>.<name>``. Nothing is replayed, so the traced output is the model's output,
and the stages are the tensors that forward pass computed.

Rules, all generic (no class is special-cased):

- A module's taps show only when every module above it taps too; a module that taps
  nothing is one stage, taken from its parent's tap of it (``tap(self, "ffn", self.ffn(h))``)
  or, for the items of a ModuleList (the blocks), from a forward hook.
- A parent's tap of a child that has taps of its own is dropped: the child's inner
  stages stand for it.
- A stage's op text comes from the emitting class's ``tap_ops`` (``{child}`` is the
  child's class name), its chapter section and component from names and provenance.
- A section reads as the chapter titles it ("7.3 LayerNorm"), unless its title names one
  component and the stage's is another: then the section number, the kind and the
  component the model has ("7.3 norm (rmsnorm)"). See ``section_label``.

Shapes: ``Stage.tensor`` keeps the batch dimension, ``Stage.shape`` drops it, so the
shapes read as the chapter writes them ([N, d], [h, N, N], [N, |V|]).
"""

from __future__ import annotations

import fnmatch
import sys
import types
from collections.abc import Iterator
from typing import Any

import torch
from attrs import field, frozen
from torch import nn

from blockspec.assembly.memory import MemoryEstimate, Part, fitted, meta_model, weight_bytes
from blockspec.errors import ArgumentTypeError, BlockspecError, Problem
from blockspec.inspect.capture import capture
from blockspec.modules.transformer import Transformer
from blockspec.registry.components import Registry
from blockspec.spec.schema import ModelSpec

POSITIONS = "7.1 positions"
RESIDUAL = "7.2 residual"
NORM = "7.3 LayerNorm"
FFN = "7.4 FFN"
OUTPUT = "7.5 output layer"
MODEL = "7.6 the full model"
SECTIONS = (POSITIONS, RESIDUAL, NORM, FFN, OUTPUT, MODEL)
TITLED = {NORM: "norm:layernorm"}  # the sections whose title names one component: the component it names

CORE = "blockspec"  # the distribution of blockspec's own classes no component made (the embedding, the probs)
POSITIONAL_TAPS = ("positional.encoding", "positional.embed", "q_rotated", "k_rotated", "score_bias")
CONTAINERS = (nn.ModuleList, nn.ModuleDict)  # never called: transparent between a module and its items


class TraceError(BlockspecError, ValueError):
    """The model or the input cannot be traced."""


@frozen(kw_only=True)
class Stage:
    """One tensor of the forward pass and where it came from."""

    name: str  # stable dotted name, e.g. "blocks.1.attn.weights"
    tensor: torch.Tensor = field(eq=False, repr=False)  # (B, ...) as computed
    op: str  # the operation that made it
    component: str | None = None  # "kind:name" of the registry component, None for core modules
    distribution: str | None = None  # who supplied it ("blockspec" for the core)
    section: str = MODEL  # the chapter section that teaches it, naming the actual component (section_label)

    @property
    def chapter(self) -> str:
        """The chapter section's number alone: "7.3"."""
        return self.section.split(" ", 1)[0]

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape without the batch dimension: (N, d), (h, N, N), ..."""
        return tuple(self.tensor.shape[1:])


@frozen
class Trace:
    """The ordered stages of one forward pass."""

    stages: tuple[Stage, ...]

    def __iter__(self) -> Iterator[Stage]:
        return iter(self.stages)

    def __len__(self) -> int:
        return len(self.stages)

    def __getitem__(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise TraceError(f"no stage named {name!r}; stages are {', '.join(self.names())}")

    def names(self) -> list[str]:
        return [stage.name for stage in self.stages]

    def select(self, pattern: str) -> dict[str, torch.Tensor]:
        """fnmatch-style selection, in stage order: ``select("blocks.*.attn.weights")``."""
        return {s.name: s.tensor for s in self.stages if fnmatch.fnmatchcase(s.name, pattern)}

    @property
    def output(self) -> torch.Tensor:
        """What the model returns: the head's output (the logits of an LM head)."""
        names = self.names()
        return self.stages[names.index("logits" if "logits" in names else "head")].tensor


def trace(model: Transformer, ids: torch.Tensor, *, start: int = 0) -> Trace:
    """Run ids (B, N) through ``model``'s own forward, recording its taps; the output is ``model(ids, start=start)``.

    Runs under ``torch.no_grad`` and leaves the model as it was (mode, parameters, hooks).
    """
    if not isinstance(model, torch.nn.Module):  # a path: trace takes the model, as the forward pass does
        raise ArgumentTypeError(Problem(path="model", expected="a built model (torch.nn.Module)",
                                        found=type(model).__name__,
                                        hint="blockspec.load(path) for a checkpoint, blockspec.build(path) for a spec"))
    if ids.dim() != 2:
        raise TraceError(Problem(path="ids", expected="token ids of shape (B, N)",
                                 found=f"shape {tuple(ids.shape)}"))
    recorder = _Recorder(model)
    with torch.no_grad(), capture(model, taps=recorder.tap, outputs=recorder.output, where=_listed):
        output = model(ids, start=start)
    return Trace(tuple(recorder.stages(output)))


def trace_estimate(spec: ModelSpec, registry: Registry | None, length: int) -> MemoryEstimate:
    """What tracing ``length`` tokens holds: the weights and every stage it keeps, measured on the meta device
    at short lengths and extrapolated (``blockspec.assembly.memory``)."""
    model = meta_model(spec, registry).eval()
    stages = fitted(lambda n: _stage_bytes(model, n), length)
    return MemoryEstimate(parts=(
        Part(what="weights", bytes=weight_bytes(model)),
        Part(what="the stages a trace keeps", bytes=stages, names={"text": "text", "ids": "ids"},
             shrink="trace a shorter {text} (or fewer {ids})")))


def _stage_bytes(model: Transformer, length: int) -> int:
    """The bytes of the stages tracing one (1, ``length``) input keeps; a tensor two stages share counts once."""
    result = trace(model, torch.zeros((1, length), dtype=torch.long, device="meta"))
    tensors = {id(stage.tensor): stage.tensor for stage in result.stages}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def section_label(section: str, component: str | None) -> str:
    """``section`` (one of SECTIONS) as a stage made by ``component`` ("kind:name") shows it.

    The chapter's title, unless the title names one component and the stage's is another:
    ``section_label(NORM, "norm:rmsnorm") == "7.3 norm (rmsnorm)"``. Titles that name no one
    component ("7.1 positions", "7.4 FFN", ...) fit every component and stay as they are.
    """
    titled = TITLED.get(section)
    if titled is None or component is None or component == titled:
        return section
    kind, _, name = component.partition(":")
    return f"{section.split(' ', 1)[0]} {kind} ({name})"


def _listed(path: str, module: nn.Module) -> bool:
    """The items of a ModuleList (the blocks): no parent taps them by name, so a hook records the untapped."""
    return path.rsplit(".", 1)[-1].isdigit()


@frozen
class _Event:
    path: str  # the module that showed the tensor
    name: str | None  # the tap's name; None for a hooked module's own output
    tensor: torch.Tensor


class _Recorder:
    """Collects taps and hooked outputs in forward order, then keeps those the rules show."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.modules = dict(model.named_modules())
        self.provenance: dict[str, Any] = getattr(model, "provenance", {}) or {}
        self.events: list[_Event] = []

    def tap(self, path: str, name: str, tensor: torch.Tensor) -> None:
        self.events.append(_Event(path, name, tensor.detach()))

    def output(self, path: str, _module: nn.Module, _inputs: tuple, output: Any) -> None:
        if isinstance(output, torch.Tensor):
            self.events.append(_Event(path, None, output.detach()))

    def stages(self, output: torch.Tensor) -> Iterator[Stage]:
        emitters = {event.path for event in self.events if event.name is not None}
        for event in self.events:
            if self.shown(event, emitters):
                yield self.stage(event)
        yield from self.output_stages(output)

    def shown(self, event: _Event, emitters: set[str]) -> bool:
        """Every module above taps; a tap of a child that taps itself, or of an Identity, gives way."""
        if not all(up in emitters for up in self.callers(event.path)):
            return False
        if event.name is None:
            return event.path not in emitters
        child = _join(event.path, event.name)
        return child not in emitters and not isinstance(self.modules.get(child), nn.Identity)

    def callers(self, path: str) -> list[str]:
        """The modules above ``path`` that call it (containers skipped), from the model down."""
        parts = path.split(".") if path else []
        above = [".".join(parts[:end]) for end in range(len(parts))]
        return [p for p in above if not isinstance(self.modules[p], CONTAINERS)]

    def stage(self, event: _Event) -> Stage:
        name = _join(event.path, event.name) if event.name is not None else event.path
        source = self.source(event)
        return Stage(name=name, tensor=event.tensor, op=self.op(event), section=self.section(event, name, source),
                     **self.maker(source))

    def source(self, event: _Event) -> str:
        """The module path a stage is credited to: the positional encoder, a tapped child, or the emitter."""
        if event.name in POSITIONAL_TAPS:
            return "positional"
        child = _join(event.path, event.name) if event.name is not None else None
        if child in self.modules and (child in self.provenance or not _is_torch(self.modules[child])):
            return child
        return event.path

    def maker(self, source: str) -> dict[str, str | None]:
        component = self.provenance.get(source) or self.builder(source)
        if component is not None:
            return {"component": f"{component.kind}:{component.name}", "distribution": component.distribution}
        module = self.modules.get(source)
        return {"component": None, "distribution": CORE if module is not None and _is_core(module) else None}

    def builder(self, source: str) -> Any:
        """A plugin's own helper module (the MoE's shared experts) is the work of the nearest component above it
        whose module comes from the same package; a module swapped in from elsewhere is nobody's."""
        module = self.modules.get(source)
        if module is None or _is_core(module) or _is_torch(module):
            return None
        parts = source.split(".")
        above = [".".join(parts[:end]) for end in range(len(parts) - 1, 0, -1)]
        owner = next((path for path in above if path in self.provenance), None)
        if owner is None or _package(self.modules[owner]) != _package(module):
            return None
        return self.provenance[owner]

    def op(self, event: _Event) -> str:
        module = self.modules[event.path]
        if event.name is None:
            return f"{_name(module)}: whole {_what(event.path)} (not traced inside)"
        template = getattr(module, "tap_ops", {}).get(event.name, f"{_name(module)}: {event.name}")
        positional = getattr(self.model, "positional", None)
        fields = {"score_bias": ""}
        if isinstance(positional, nn.Module):
            fields["positional"] = _Named(positional)
            fields["score_bias"] = " + bias" if getattr(positional, "biases", False) else ""
        fields.update((n, _Named(c)) for n, c in module.named_children())
        return template.format(**fields)

    def section(self, event: _Event, name: str, source: str) -> str:
        component = self.provenance.get(source)
        if source == "positional":
            return POSITIONS
        if name.endswith("residual"):
            return RESIDUAL
        if component is not None and component.kind == "norm":
            return section_label(NORM, f"{component.kind}:{component.name}")
        return FFN if "ffn" in name.split(".") else MODEL

    def output_stages(self, out: torch.Tensor) -> Iterator[Stage]:
        """The model's return value: logits and next-token probabilities (or a head's output)."""
        embedding = getattr(self.model, "embedding", None)
        is_lm = out.dim() == 3 and embedding is not None and out.shape[-1] == embedding.num_embeddings
        name, what = ("logits", "logits over the vocabulary") if is_lm else ("head", "head output")
        head = self.modules.get("head", self.model)
        yield Stage(name=name, tensor=out.detach(), op=f"{_name(head)}(x): {what}", section=OUTPUT, **self.maker("head"))
        yield Stage(name="probs", tensor=out.float().softmax(dim=-1), section=OUTPUT, component=None,
                    distribution=CORE, op="softmax: next-token probabilities" if is_lm
                    else "softmax over the head's outputs")


class _Named:
    """A module in an op template: prints as its class name, ``{up.out_features}`` reads its attributes."""

    def __init__(self, module: nn.Module) -> None:
        self._module = module

    def __str__(self) -> str:
        return _name(self._module)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._module, attribute)


def _name(module: nn.Module) -> str:
    return type(module).__name__


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _what(path: str) -> str:
    """'block' for blocks.3, else 'module'."""
    parent = path.rsplit(".", 2)[0] if path.count(".") else ""
    return "block" if parent == "blocks" else "module"


def _is_torch(module: nn.Module) -> bool:
    return type(module).__module__.startswith("torch.")


def _package(module: nn.Module) -> str:
    return type(module).__module__.split(".", 1)[0]


def _is_core(module: nn.Module) -> bool:
    return type(module).__module__.startswith("blockspec.")


class _CallableModule(types.ModuleType):
    """Lets ``blockspec.trace(model, ids)`` work although ``blockspec.inspect.trace`` is also this module's name.

    Python binds a package attribute to its submodule once the submodule is imported, so
    the function alone could not keep the name; calling the module calls the function.
    """

    def __call__(self, model: Transformer, ids: torch.Tensor, *, start: int = 0) -> Trace:
        return trace(model, ids, start=start)


sys.modules[__name__].__class__ = _CallableModule
