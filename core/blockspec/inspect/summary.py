"""What `blockspec show` reports: each module's output shape in N, parameters and provider.

Everything is measured on the meta device, so a 70B spec costs no memory.
"""

from __future__ import annotations

import attrs
from attrs import frozen

from blockspec.assembly.counting import count_model
from blockspec.inspect.layers import LayerGroup, layer_components
from blockspec.registry.components import Registry
from blockspec.spec.schema import ModelSpec

Shape = tuple[int | str, ...]  # a module's output shape, "N" (or "2N", "N+1") where it follows the length


@frozen(kw_only=True)
class ModuleRow:
    path: str
    module: str  # class name
    shape: str  # output shape without the batch dim, N symbolic: "N x 768"
    parameters: int  # not counting parameters an earlier row already owns (a tied head shows 0)
    depth: int  # 0: a child of the model; 1: a child of a block
    component: str | None = None  # "kind:name"
    distribution: str | None = None


@frozen(kw_only=True)
class AdaptedRow:
    """One layer an [[adapters]] entry wraps, and the adapter's own parameters there (what trains, base frozen)."""

    path: str
    component: str  # "adapter:name"
    distribution: str
    parameters: int


@frozen(kw_only=True)
class ModelSummary:
    name: str
    parameters: int
    parameters_estimate: int | None  # 12·L·d² + |V|·d; None where the model's FFNs are not the dense one it counts
    rows: tuple[ModuleRow, ...]
    layer_groups: tuple[int, ...] = ()  # per layer: which distinct configuration it has ([[layers]])
    parameters_active: int | None = None  # what one token passes through (a MoE's top_k experts); None: all
    layers: tuple[LayerGroup, ...] = ()  # each kind's components and the layers that use them
    adapted: tuple[AdaptedRow, ...] = ()  # the layers [[adapters]] wrap; () without adapters

    @property
    def parameters_adapter(self) -> int:
        """The adapters' own parameters: what trains when the base is frozen."""
        return sum(row.parameters for row in self.adapted)


def summarize(spec: ModelSpec, registry: Registry | None = None) -> ModelSummary:
    from blockspec.assembly.assemble import build

    model = build(spec, registry=registry, device="meta")
    shapes = _record_all_shapes(model, probe_lengths(spec))
    rows = _rows(model, shapes)
    count = count_model(model)
    return ModelSummary(name=spec.model.name, parameters=count.exact, parameters_estimate=count.estimate,
                        parameters_active=count.active, rows=tuple(rows), layer_groups=layer_groups(spec),
                        layers=layer_components(spec), adapted=_adapted(model))


def _adapted(model) -> tuple[AdaptedRow, ...]:
    rows = []
    for path, component in model.adapted.items():
        own = sum(p.numel() for _, p in model.get_submodule(path).adapter_parameters())
        rows.append(AdaptedRow(path=path, component=f"{component.kind}:{component.name}",
                               distribution=component.distribution, parameters=own))
    return tuple(rows)


def layer_groups(spec: ModelSpec) -> tuple[int, ...]:
    """Each layer's configuration as a number: equal numbers, equal components and configs."""
    distinct: list[object] = []
    groups = []
    for i in range(spec.model.n_layers):
        layer = spec.layer(i)
        if layer not in distinct:
            distinct.append(layer)
        groups.append(distinct.index(layer))
    return tuple(groups)


def fold_blocks(rows: tuple[ModuleRow, ...] | list[ModuleRow], groups: tuple[int, ...] = ()) -> list[ModuleRow]:
    """blocks.0 in full (with its children); each later run of blocks that repeat one another as one row.

    A run of one block keeps its own path (``blocks.1``); a run of k > 1 reads ``blocks.1-3`` with the
    module ``PreNormBlock x3`` and the run's parameters. The children of the folded blocks are left out.
    ``groups`` (``ModelSummary.layer_groups``) keeps layers that [[layers]] configures differently apart.
    """
    blocks = [r for r in rows if r.path.startswith("blocks.") and r.depth == 0]
    if len(blocks) <= 1:
        return list(rows)

    def group(row: ModuleRow) -> int | None:
        index = int(row.path.split(".")[1])
        return groups[index] if index < len(groups) else None

    runs: list[list[ModuleRow]] = []
    for block in blocks[1:]:
        if runs and _same_block(runs[-1][0], block) and group(runs[-1][0]) == group(block):
            runs[-1].append(block)
        else:
            runs.append([block])
    kept = [r for r in rows if not r.path.startswith("blocks.") or r.path.split(".")[1] == "0"]
    index = max(i for i, r in enumerate(kept) if r.path.startswith("blocks.0")) + 1
    return kept[:index] + [_folded(run) for run in runs] + kept[index:]


def _same_block(a: ModuleRow, b: ModuleRow) -> bool:
    return (a.module, a.shape, a.parameters, a.component, a.distribution) == \
        (b.module, b.shape, b.parameters, b.component, b.distribution)


def _folded(run: list[ModuleRow]) -> ModuleRow:
    if len(run) == 1:
        return run[0]
    first, last = run[0].path.split(".")[1], run[-1].path.split(".")[1]
    return attrs.evolve(run[0], path=f"blocks.{first}-{last}", module=f"{run[0].module} x{len(run)}",
                        parameters=sum(r.parameters for r in run))


def probe_lengths(spec: ModelSpec) -> tuple[int, ...]:
    """Two sequence lengths to run the model at: a dimension is N exactly when it follows the length.

    Comparing two probes, not one, is what keeps a width that happens to equal a probe length
    (a qkv of 32 next to a context of 33) from printing as N. A context of 1 allows one probe only.
    """
    first = symbolic_length(spec)
    others = [n for n in range(min(spec.model.context_length, 509), 0, -1) if n != first]
    return (first, others[0]) if others else (first,)


def symbolic_length(spec: ModelSpec) -> int:
    """A sequence length that no model size equals, so that a lone probe at it still reads back as "N"."""
    m = spec.model
    taken = {m.vocab_size, m.context_length, m.d_model, m.n_layers, m.n_heads, m.kv_heads,
             m.d_ff, 2 * m.d_ff, m.head_dim, 1}
    for part in spec.distinct_components():
        taken |= {v for v in vars_of(part.config) if isinstance(v, int)}
    ceiling = min(m.context_length, 509)
    return next((n for n in range(ceiling, 1, -1) if n not in taken), ceiling)


def vars_of(config: object) -> list[object]:
    return [getattr(config, a.name) for a in attrs.fields(type(config))]


def _listed(model) -> list[tuple[str, object, int]]:
    """(path, module, depth): the model's children, and each block's children."""
    listed = []
    for name, child in model.named_children():
        if name == "blocks":
            for index, block in enumerate(child):
                listed.append((f"blocks.{index}", block, 0))
                listed += [(f"blocks.{index}.{n}", c, 1) for n, c in block.named_children() if n != "drop"]
        elif name != "drop":
            listed.append((name, child, 0))
    return listed


def _rows(model, shapes: dict[str, Shape]) -> list[ModuleRow]:
    rows, owned = [], set()
    for path, module, depth in _listed(model):
        params = [p for p in module.parameters() if depth or id(p) not in owned]
        if depth == 0:
            owned |= {id(p) for p in params}
        component = model.provenance.get(path) or model.provenance.get(f"{path}.act")  # ffn: its activation
        rows.append(ModuleRow(
            path=path, module=type(module).__name__, depth=depth,
            shape=_shape_text(path, module, shapes),
            parameters=sum(p.numel() for p in params),
            component=f"{component.kind}:{component.name}" if component else None,
            distribution=component.distribution if component else None,
        ))
    return rows


def _shape_text(path: str, module, shapes: dict[str, Shape]) -> str:
    if path == "positional":
        kinds = [w for w, on in (("added", module.adds), ("rotates q, k", module.rotates),
                                 ("score bias", module.biases)) if on]
        added = shapes.get("embedding")
        text = _dims(added[1:]) + " " if module.adds and added else ""
        return text + "(" + ", ".join(kinds or ["none"]) + ")"
    shape = shapes.get(path)
    return _dims(shape[1:]) if shape else "-"


def _dims(dims: Shape) -> str:
    return " x ".join(map(str, dims))


# -- the component tree (`blockspec show --tree`) ------------------------------------------------------


@frozen(kw_only=True)
class TreeNode:
    """One module of the assembled model, with who provides it and what it owns."""

    path: str  # dotted module path; "" for the model itself
    module: str  # class name
    shape: str  # output shape without the batch dim, N symbolic; "-" when never called on its own
    parameters: int  # parameters of this subtree, each counted at its first owner (a tied head shows 0)
    component: str | None = None  # "kind:name"
    distribution: str | None = None
    version: str | None = None
    tied: tuple[str, ...] = ()  # "head.weight -> embedding.weight" for parameters owned elsewhere
    children: tuple[TreeNode, ...] = ()

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1] if self.path else ""


def component_tree(spec: ModelSpec, registry: Registry | None = None) -> TreeNode:
    """The resolved module tree of ``spec``, built on the meta device (no memory)."""
    from blockspec.assembly.assemble import build

    model = build(spec, registry=registry, device="meta")
    shapes = _record_all_shapes(model, probe_lengths(spec))
    owners = _parameter_owners(model)
    return _node(model, "", model, shapes, owners)


def _record_all_shapes(model, lengths: tuple[int, ...]) -> dict[str, Shape]:
    """Every submodule's output shape, N where a dimension follows the sequence length (meta device)."""
    probes = [_probe(model, n) for n in lengths]
    return {path: _symbolic(shape, [p.get(path) for p in probes[1:]], lengths)
            for path, shape in probes[0].items()}


def _probe(model, n_tokens: int) -> dict[str, tuple[int, ...]]:
    """Every submodule's output shape, from one forward pass of n_tokens on the meta device."""
    import torch

    from blockspec.inspect.capture import capture

    shapes: dict[str, tuple[int, ...]] = {}

    def record(path: str, _module, _inputs, output) -> None:
        if isinstance(output, torch.Tensor):
            shapes[path] = tuple(output.shape)

    with torch.no_grad(), capture(model, outputs=record, where=lambda path, _m: bool(path)):
        model(torch.zeros(1, n_tokens, dtype=torch.long, device="meta"))
    return shapes


def _symbolic(shape: tuple[int, ...], others: list[tuple[int, ...] | None], lengths: tuple[int, ...]) -> Shape:
    """One probe's shape with each dimension that follows the length written in N ("N", "2N", "N+1")."""
    if not others:  # a single probe: only a dimension equal to its length can be N
        return tuple("N" if d == lengths[0] else d for d in shape)
    other, n, m = others[0], lengths[0], lengths[1]
    if other is None or len(other) != len(shape):
        return shape
    return tuple(_in_n(d, e, n, m) for d, e in zip(shape, other))


def _in_n(d: int, e: int, n: int, m: int) -> int | str:
    """d at length n, e at length m: a number when it does not change, else d as a function of N."""
    if d == e:
        return d
    if d * m == e * n and d % n == 0:
        return "N" if d == n else f"{d // n}N"
    if d - n == e - m:
        return f"N{d - n:+d}"
    return "N?"  # follows the length, but not as k·N or N+c


def _parameter_owners(model) -> dict[int, tuple[str, int]]:
    """id(parameter) -> (the module path that owns it first, its size)."""
    owners: dict[int, tuple[str, int]] = {}
    for path, module in model.named_modules():
        for param in module.parameters(recurse=False):
            owners.setdefault(id(param), (path, param.numel()))
    return owners


def _node(model, path: str, module, shapes, owners) -> TreeNode:
    children = tuple(
        _node(model, f"{path}.{name}" if path else name, child, shapes, owners)
        for name, child in module.named_children() if type(child).__name__ != "Dropout"
    )
    owned = sum(size for owner, size in owners.values() if _within(owner, path))
    tied = tuple(f"{_join(path, n)} -> {_join(owners[id(p)][0], n)}"
                 for n, p in module.named_parameters(recurse=False) if owners[id(p)][0] != path)
    component = model.provenance.get(path) or model.adapted.get(path)
    return TreeNode(
        path=path, module=type(module).__name__, parameters=owned, tied=tied, children=children,
        shape=_shape_text(path, module, shapes) if path else _model_shape(shapes),
        component=f"{component.kind}:{component.name}" if component else None,
        distribution=component.distribution if component else None,
        version=component.version if component else None,
    )


def _within(owner: str, path: str) -> bool:
    return not path or owner == path or owner.startswith(path + ".")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _model_shape(shapes: dict[str, Shape]) -> str:
    head = shapes.get("head")
    return _dims(head[1:]) if head else "-"
