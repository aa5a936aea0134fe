"""The spec's [[adapters]], applied to a built model: each targeted ``nn.Linear`` swapped for its adapter.

Runs after the model is assembled and initialised, so the base is exactly what a spec without
adapters builds, and an adapter's own initialisation (a DoRA magnitude read off the weight) sees
the base's final weights. A model without [[adapters]] never reaches this module.
"""

from __future__ import annotations

import difflib
import re

from torch import nn

from blockspec.assembly.context import BuildContext
from blockspec.errors import Problem, SpecError
from blockspec.modules.adapter import Adapter
from blockspec.modules.transformer import Transformer
from blockspec.registry.components import Component, Registry
from blockspec.spec.schema import AdapterSpec

ROLE = "@"  # "@attention": every linear layer of the components of that kind


def apply_adapters(model: Transformer, registry: Registry) -> None:
    """Wrap every layer each [[adapters]] entry targets, in order; ``model.adapted`` records path -> component."""
    for k, entry in enumerate(model.spec.adapters):
        component = _component(model, registry, entry, k)
        for path in targets(model, entry, k):
            _wrap(model, component, entry, path, k)


def targets(model: nn.Module, entry: AdapterSpec, k: int) -> list[str]:
    """The module paths entry ``k`` wraps, in model order; each pattern must name at least one linear layer."""
    found: set[str] = set()
    for j, pattern in enumerate(entry.targets):
        found.update(_matched(model, pattern, _at(model, k, f"targets[{j}]")))
    return [path for path, _ in model.named_modules() if path in found]


def _matched(model: nn.Module, pattern: str, where: tuple[str | None, str]) -> list[str]:
    paths = _outside_adapters(model)
    hits = [p for p in _role(model, pattern[len(ROLE):], where) if p in paths] if pattern.startswith(ROLE) else \
        [p for p in paths if _glob(pattern).fullmatch(p)]
    wrapped = [p for p in hits if isinstance(paths[p], Adapter)]
    if wrapped:
        raise _error(where, f"{wrapped[0]} is wrapped already, by an earlier [[adapters]] entry",
                     "each layer takes one adapter: drop it from one of the entries")
    if not hits:
        linear_paths = [p for p, module in paths.items() if isinstance(module, nn.Linear)]  # what an adapter takes
        near = difflib.get_close_matches(pattern, linear_paths or list(paths), n=3, cutoff=0.4)
        raise _error(where, f"pattern {pattern!r} matches no module",
                     "the nearest: " + ", ".join(near) if near else "see `blockspec show` for the module paths")
    linear = [p for p in hits if isinstance(paths[p], nn.Linear)]
    if not linear:
        kinds = ", ".join(f"{p} ({type(paths[p]).__name__})" for p in hits[:3])
        raise _error(where, f"pattern {pattern!r} matches no linear layer: {kinds}{', ...' if len(hits) > 3 else ''}",
                     "an adapter wraps an nn.Linear")
    return linear


def _outside_adapters(model: nn.Module) -> dict[str, nn.Module]:
    """Every module by path but those inside an adapter (its base_layer, its own lora_A ...): what a target may be."""
    found: dict[str, nn.Module] = {}
    inside: list[str] = []
    for path, module in model.named_modules():
        if not path or any(path.startswith(p + ".") for p in inside):
            continue
        found[path] = module
        if isinstance(module, Adapter):
            inside.append(path)
    return found


def _role(model: nn.Module, kind: str, where: tuple[str | None, str]) -> list[str]:
    """Every module inside a component of ``kind`` (the innermost component that holds it decides)."""
    provenance: dict[str, Component] = getattr(model, "provenance", {})
    kinds = sorted({c.kind for c in provenance.values()})
    if kind not in kinds:
        raise _error(where, f"role {ROLE}{kind} names no kind of this model's components",
                     f"one of {', '.join(ROLE + k for k in kinds)}")
    owners = sorted(provenance, key=len, reverse=True)
    return [p for p, _ in model.named_modules() if p and _owner(p, owners, provenance) == kind]


def _owner(path: str, owners: list[str], provenance: dict[str, Component]) -> str | None:
    for owner in owners:
        if path == owner or path.startswith(owner + "."):
            return provenance[owner].kind
    return None


def _glob(pattern: str) -> re.Pattern[str]:
    """``*`` and ``?`` within one dotted segment: ``blocks.*.ffn.*`` is every FFN's direct children."""
    return re.compile(re.escape(pattern).replace(r"\*", "[^.]*").replace(r"\?", "[^.]"))


def _component(model: Transformer, registry: Registry, entry: AdapterSpec, k: int) -> Component:
    component = registry.get("adapter", entry.name, entry.distribution)
    if component is None:
        raise _error(_at(model, k, "use"), f"adapter {entry.use!r} is not available in this registry")
    return component


def _wrap(model: Transformer, component: Component, entry: AdapterSpec, path: str, k: int) -> None:
    linear = model.get_submodule(path)
    rank = getattr(entry.config, "rank", None)
    if isinstance(rank, int) and rank > min(linear.in_features, linear.out_features):
        raise _error(_at(model, k, "rank"), f"rank {rank} is larger than {path}'s min(in, out) = "
                                            f"min({linear.in_features}, {linear.out_features})",
                     "a rank above the layer's smaller side adds nothing a full-rank update lacks")
    ctx = BuildContext(model=model.spec.model, embedding=model.embedding, target=linear)
    try:
        module = component.build(entry.config, ctx)
    except (ValueError, TypeError, RuntimeError) as error:
        raise _error(_at(model, k), f"{component.qualified_name} cannot wrap {path}: {error}") from error
    parent, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, name, module)
    model.adapted[path] = component


def _at(model: nn.Module, k: int, key: str | None = None) -> tuple[str | None, str]:
    spec = getattr(model, "spec")
    return spec.source, f"$.adapters[{k}]" + (f".{key}" if key else "")


def _error(where: tuple[str | None, str], message: str, hint: str | None = None) -> SpecError:
    file, path = where
    return SpecError(Problem(file=file, path=path, message=message, hint=hint))


__all__ = ["apply_adapters", "targets"]
