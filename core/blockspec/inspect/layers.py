"""Which layers use what: each layer's components, grouped, for `blockspec show` and the explorer's header.

A model's layers may differ ([[layers]]: Gemma's sliding and global attention, a RoPE base per
layer, a MoE every other layer), so a label is read from each layer's own component, never from
one model-wide setting such as ``[model] norm_placement``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from attrs import frozen

from blockspec.spec.convert import component_table, number_ranges
from blockspec.spec.schema import LAYER_KINDS, ComponentSpec, ModelSpec


@frozen(kw_only=True)
class LayerGroup:
    """The layers that build one kind from the same component with the same options."""

    kind: str  # one of LAYER_KINDS
    component: str  # "kind:name"
    options: Mapping[str, Any]  # the component's table as a spec writes it, without ``use``
    layers: tuple[int, ...]


def layer_components(spec: ModelSpec) -> tuple[LayerGroup, ...]:
    """Each kind [[layers]] may vary, in LAYER_KINDS order: one group per distinct component, in first-use order."""
    groups: list[LayerGroup] = []
    for kind in LAYER_KINDS:
        parts = [getattr(spec.layer(i), kind) for i in range(spec.model.n_layers)]
        groups += [_group(kind, part, layers) for part, layers in runs_of(parts)]
    return tuple(groups)


def _group(kind: str, part: ComponentSpec, layers: tuple[int, ...]) -> LayerGroup:
    options = {key: value for key, value in component_table(part).items() if key != "use"}
    return LayerGroup(kind=kind, component=f"{kind}:{part.name}", options=options, layers=layers)


def runs_of(values: Sequence[Any]) -> list[tuple[Any, tuple[int, ...]]]:
    """Each distinct value (by equality) with the indices that hold it, in first-seen order."""
    found: list[tuple[Any, list[int]]] = []
    for index, value in enumerate(values):
        match = next((indices for seen, indices in found if seen == value), None)
        if match is None:
            found.append((value, [index]))
        else:
            match.append(index)
    return [(value, tuple(indices)) for value, indices in found]


def layers_text(layers: Sequence[int]) -> str:
    """A set of layers as a reader counts them: "0-3", "1, 3, ..., 25" (a stride), "0-2, 5"."""
    steps = {b - a for a, b in zip(layers, layers[1:])}
    if len(layers) > 3 and len(steps) == 1 and steps != {1}:
        return f"{layers[0]}, {layers[1]}, ..., {layers[-1]}"
    return number_ranges(list(layers))


def blocks_label(model: Any) -> str:
    """The blocks a built model runs, from its provenance: "sandwich blocks", "pre blocks (0, 1), parallel (2)"."""
    names: list[Hashable] = []
    for index, block in enumerate(model.blocks):
        component = model.provenance.get(f"blocks.{index}")
        names.append(component.name if component is not None else type(block).__name__)
    runs = runs_of(names)
    if len(runs) == 1:
        return f"{runs[0][0]} blocks"
    first, *rest = runs
    return ", ".join([f"{first[0]} blocks ({layers_text(first[1])})",
                      *(f"{name} ({layers_text(layers)})" for name, layers in rest)])
