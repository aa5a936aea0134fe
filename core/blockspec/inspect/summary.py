"""What `blockspec show` reports: each module's output shape in N, parameters and provider.

Everything is measured on the meta device, so a 70B spec costs no memory.
"""

from __future__ import annotations

from attrs import frozen

from blockspec.assembly.counting import estimate_parameters
from blockspec.registry.components import Registry
from blockspec.spec.schema import ModelSpec


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
class ModelSummary:
    name: str
    parameters: int
    parameters_estimate: int
    rows: tuple[ModuleRow, ...]


def summarize(spec: ModelSpec, registry: Registry | None = None) -> ModelSummary:
    from blockspec.assembly.assemble import build

    model = build(spec, registry=registry, device="meta")
    n_tokens = symbolic_length(spec)
    shapes = _record_all_shapes(model, n_tokens)
    rows = _rows(model, shapes, n_tokens)
    total = sum(p.numel() for p in model.parameters())
    return ModelSummary(name=spec.model.name, parameters=total,
                        parameters_estimate=estimate_parameters(spec.model), rows=tuple(rows))


def symbolic_length(spec: ModelSpec) -> int:
    """A sequence length that no model size equals, so it can be printed back as "N"."""
    m = spec.model
    taken = {m.vocab_size, m.context_length, m.d_model, m.n_layers, m.n_heads, m.kv_heads,
             m.d_ff, 2 * m.d_ff, m.head_dim, 1}
    for part in spec.components():
        taken |= {v for v in vars_of(part.config) if isinstance(v, int)}
    ceiling = min(m.context_length, 509)
    return next((n for n in range(ceiling, 1, -1) if n not in taken), ceiling)


def vars_of(config: object) -> list[object]:
    import attrs

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


def _rows(model, shapes: dict[str, tuple[int, ...]], n_tokens: int) -> list[ModuleRow]:
    rows, owned = [], set()
    for path, module, depth in _listed(model):
        params = [p for p in module.parameters() if depth or id(p) not in owned]
        if depth == 0:
            owned |= {id(p) for p in params}
        component = model.provenance.get(path) or model.provenance.get(f"{path}.act")  # ffn: its activation
        rows.append(ModuleRow(
            path=path, module=type(module).__name__, depth=depth,
            shape=_shape_text(path, module, shapes, n_tokens),
            parameters=sum(p.numel() for p in params),
            component=f"{component.kind}:{component.name}" if component else None,
            distribution=component.distribution if component else None,
        ))
    return rows


def _shape_text(path: str, module, shapes: dict[str, tuple[int, ...]], n_tokens: int) -> str:
    if path == "positional":
        kinds = [w for w, on in (("added", module.adds), ("rotates q, k", module.rotates),
                                 ("score bias", module.biases)) if on]
        added = shapes.get("embedding")
        text = _dims(added[1:], n_tokens) + " " if module.adds and added else ""
        return text + "(" + ", ".join(kinds or ["none"]) + ")"
    shape = shapes.get(path)
    return _dims(shape[1:], n_tokens) if shape else "-"


def _dims(dims: tuple[int, ...], n_tokens: int) -> str:
    return " x ".join("N" if d == n_tokens else str(d) for d in dims)


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
    n_tokens = symbolic_length(spec)
    shapes = _record_all_shapes(model, n_tokens)
    owners = _parameter_owners(model)
    return _node(model, "", model, shapes, owners, n_tokens)


def _record_all_shapes(model, n_tokens: int) -> dict[str, tuple[int, ...]]:
    """Every submodule's output shape, from one forward pass on the meta device."""
    import torch

    from blockspec.inspect.capture import capture

    shapes: dict[str, tuple[int, ...]] = {}

    def record(path: str, _module, _inputs, output) -> None:
        if isinstance(output, torch.Tensor):
            shapes[path] = tuple(output.shape)

    with torch.no_grad(), capture(model, outputs=record, where=lambda path, _m: bool(path)):
        model(torch.zeros(1, n_tokens, dtype=torch.long, device="meta"))
    return shapes


def _parameter_owners(model) -> dict[int, tuple[str, int]]:
    """id(parameter) -> (the module path that owns it first, its size)."""
    owners: dict[int, tuple[str, int]] = {}
    for path, module in model.named_modules():
        for param in module.parameters(recurse=False):
            owners.setdefault(id(param), (path, param.numel()))
    return owners


def _node(model, path: str, module, shapes, owners, n_tokens: int) -> TreeNode:
    children = tuple(
        _node(model, f"{path}.{name}" if path else name, child, shapes, owners, n_tokens)
        for name, child in module.named_children() if type(child).__name__ != "Dropout"
    )
    owned = sum(size for owner, size in owners.values() if _within(owner, path))
    tied = tuple(f"{_join(path, n)} -> {_join(owners[id(p)][0], n)}"
                 for n, p in module.named_parameters(recurse=False) if owners[id(p)][0] != path)
    component = model.provenance.get(path)
    return TreeNode(
        path=path, module=type(module).__name__, parameters=owned, tied=tied, children=children,
        shape=_shape_text(path, module, shapes, n_tokens) if path else _model_shape(shapes, n_tokens),
        component=f"{component.kind}:{component.name}" if component else None,
        distribution=component.distribution if component else None,
        version=component.version if component else None,
    )


def _within(owner: str, path: str) -> bool:
    return not path or owner == path or owner.startswith(path + ".")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _model_shape(shapes: dict[str, tuple[int, ...]], n_tokens: int) -> str:
    head = shapes.get("head")
    return _dims(head[1:], n_tokens) if head else "-"
