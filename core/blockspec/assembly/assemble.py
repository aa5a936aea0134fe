"""spec + registry -> Transformer. Registry look-ups happen here, once, never per forward."""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path

import attrs
import torch
from torch import nn

from blockspec.assembly.adapters import apply_adapters
from blockspec.assembly.context import BuildContext
from blockspec.assembly.deferred_init import DeferredInit
from blockspec.assembly.initialisation import InitPlan, check_declarations, declare_init, init_plan
from blockspec.errors import ArgumentTypeError, Problem, SpecError
from blockspec.modules.transformer import Transformer
from blockspec.registry.components import Component, Registry
from blockspec.spec.schema import INIT_STD, ComponentSpec, InitConfig, ModelConfig, ModelSpec, estimate_parameters
from blockspec.spec.validators import sized_mismatches

__all__ = ["INIT_STD", "adapt", "build", "build_unfilled", "given_spec", "init_weights"]
# Deferring init costs ~1 µs per torch call of the construction and saves the default init of
# every weight; it pays from about 2·10^5 parameters (a 2-core CPU: d = 128, L = 2 gains 20%).
DEFER_FROM_PARAMETERS = 200_000


def build(
    spec: ModelSpec | str | os.PathLike[str],
    *,
    registry: Registry | None = None,
    seed: int | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Transformer:
    """Assemble the model a spec describes (a ModelSpec, or the path of a spec file); same seed, same weights.

    In training mode, as PyTorch constructs every module (and as ``load`` returns one):
    call ``.eval()`` before inference if the spec has dropout.
    """
    return _construct(given_spec(spec, registry), registry, seed, device, dtype, initialise=True)


def given_spec(spec: object, registry: Registry | None = None) -> ModelSpec:
    """What ``build`` and ``count_parameters`` take: a ModelSpec, or the path of a spec file (read here).

    A directory (a checkpoint's, a Hugging Face model's) is refused with where its spec or weights come
    from; another type is an ``ArgumentTypeError`` naming it."""
    if isinstance(spec, ModelSpec):
        return spec
    if not isinstance(spec, (str, os.PathLike)):
        raise ArgumentTypeError(Problem(path="spec", expected="a ModelSpec or the path of a spec file (str or Path)",
                                        found=type(spec).__name__))
    if Path(spec).is_dir():
        raise SpecError(Problem(file=str(spec), message="a directory", hint=(
            "a spec file is what is read here; a checkpoint's or a Hugging Face directory's model with its weights "
            "is blockspec.load(path), its spec blockspec.open_source(path).spec "
            "(blockspec.sources.load_spec_or_checkpoint(path))")))
    from blockspec.registry.specs import load_spec

    return load_spec(spec, registry)


def build_unfilled(
    spec: ModelSpec,
    *,
    registry: Registry | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Transformer:
    """The model with every parameter and persistent buffer allocated but not initialised.

    For loaders that overwrite all of them: initialising first would only cost time
    (over a second at GPT-2 small). Non-persistent buffers (position tables) are computed.
    """
    return _construct(spec, registry, None, device, dtype, initialise=False)


def _construct(spec: ModelSpec, registry: Registry | None, seed: int | None, device: torch.device | str | None,
               dtype: torch.dtype | None, *, initialise: bool) -> Transformer:
    registry = registry if registry is not None else _default_registry()
    target = torch.device(device or "cpu")
    rng = torch.random.fork_rng(devices=[]) if seed is not None else nullcontext()
    with rng, _placement(target):
        if seed is not None:
            _seed(seed, target)
        deferred = DeferredInit()
        defer = not initialise or estimate_parameters(spec.model) >= DEFER_FROM_PARAMETERS
        with deferred if defer else nullcontext():
            model = _Assembler(spec, registry).model()
        if target.type != "meta":  # meta tensors hold no values: nothing to initialise
            _initialise(model, deferred, drawn=initialise)
        if spec.adapters:  # after the base is final: an adapter may read its weights (DoRA's magnitude)
            apply_adapters(model, registry)
    return model.to(dtype=dtype) if dtype is not None else model


def adapt(model: Transformer, spec: ModelSpec, registry: Registry | None = None, *,
          seed: int | None = None) -> Transformer:
    """``model`` (its weights final, its spec ``spec`` without the [[adapters]]) wrapped as ``spec``'s [[adapters]]
    say, in place: how adapters go onto a trained base. Their initial values are drawn from ``seed``; with None,
    from a fork of the generator (whatever they are, a loader overwrites them), which is left as it was."""
    registry = registry if registry is not None else _default_registry()
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        if seed is not None:
            _seed(seed, device)
        model.spec = spec
        apply_adapters(model, registry)
    return model


def _initialise(model: Transformer, deferred: DeferredInit, *, drawn: bool) -> None:
    """Run the deferred init calls that nothing overwrites; then the spec's [init], or leave it to a loader."""
    plan = _checked_plan(model) if drawn else None
    if deferred.calls:
        overwritten = plan.parameters if plan is not None else model.state_dict(keep_vars=True).values()
        deferred.finish(overwritten=overwritten)
    if plan is not None:
        plan.draw(model.spec.init, model.spec.model.n_layers)


def _checked_plan(model: Transformer) -> InitPlan:
    """What [init] draws; an ``init_roles`` its module cannot keep is a SpecError at its component's table."""
    try:
        return init_plan(model)
    except TypeError as error:
        raise _declaration_error(model, error) from error


def _declaration_error(model: Transformer, error: TypeError) -> SpecError:
    """The component whose module tree holds the bad declaration: the innermost one that fails the check."""
    for path in sorted(model.provenance, key=lambda p: p.count("."), reverse=True):
        try:
            check_declarations(model.get_submodule(path))
        except TypeError:
            component = model.provenance[path]
            return SpecError(Problem(file=model.spec.source, path=f"$.{component.kind}",
                                     message=f"{component.qualified_name} cannot be built: {error}"))
    return SpecError(Problem(file=model.spec.source, path="$.model", message=str(error)))


def _placement(target: torch.device):
    """A device context only when needed: it intercepts every torch call of the build (slow for small models)."""
    return nullcontext() if target == torch.get_default_device() else target


def _seed(seed: int, target: torch.device) -> None:
    """Seed the generator the build draws from; torch.manual_seed also visits every accelerator backend."""
    if target.type in ("cpu", "meta"):
        torch.default_generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def _default_registry() -> Registry:
    from blockspec.registry.loading import load_registry

    return load_registry()


class _Assembler:
    """Resolves each component once and wires the modules together."""

    def __init__(self, spec: ModelSpec, registry: Registry) -> None:
        self.spec = spec
        self.registry = registry
        self.provenance: dict[str, Component] = {}
        self.components: dict[tuple[str, str, str | None], Component | None] = {}  # one look-up per component

    def model(self) -> Transformer:
        cfg = self.spec.model
        embedding = declare_init(nn.Embedding(cfg.vocab_size, cfg.d_model), {"weight": "token_embedding"})
        ctx = BuildContext(model=cfg, embedding=embedding)
        model = Transformer(
            embedding=embedding,
            positional=self.make(self.spec.positional, ctx, "positional"),
            layer_positional=self.layer_positional(ctx),
            blocks=[self.block(i, ctx) for i in range(cfg.n_layers)],
            final_norm=self.make(self.spec.norm, ctx, "final_norm") if cfg.has_final_norm else nn.Identity(),
            head=self.make(self.spec.head, ctx, "head"),
            dropout=cfg.dropout,
            embedding_scale=cfg.embedding_multiplier,
            spec=self.spec,
            provenance=self.provenance,  # filled by the make() calls above, evaluated first
        )
        return model

    def layer_positional(self, ctx: BuildContext) -> dict[int, nn.Module]:
        """The encoders of layers whose [[layers]] entry varies [positional]; one module per distinct table."""
        first: dict[ComponentSpec, int] = {}  # each distinct table -> the first layer that uses it
        found: dict[int, nn.Module] = {}
        for i in range(self.spec.model.n_layers):
            part = self.spec.layer(i).positional
            if part == self.spec.positional:
                continue
            if part not in first:
                first[part], found[i] = i, self._varied_positional(part, ctx, i)
            else:
                found[i] = found[first[part]]
                self.provenance[f"layer_positional.{i}"] = self.provenance[f"layer_positional.{first[part]}"]
        return found

    def _varied_positional(self, part: ComponentSpec, ctx: BuildContext, index: int) -> nn.Module:
        module = self.make(part, ctx, f"layer_positional.{index}", layer=index)
        if getattr(module, "adds", False):
            raise SpecError(Problem(file=self.spec.source, path="$.layers",
                                    message=f"positional {part.use!r} adds to the embeddings, once for the whole "
                                            f"model: it cannot vary per layer (layer {index})",
                                    hint="vary a rotary or score-bias encoder (rope, alibi)"))
        return module

    def block(self, index: int, ctx: BuildContext) -> nn.Module:
        """The block component wires layer ``index``; it builds its sublayers through ``ctx.layer``."""
        prefix = f"blocks.{index}"
        return self.make(self.spec.layer(index).block, self.layer_context(ctx, index, prefix), prefix, layer=index)

    def layer_context(self, ctx: BuildContext, index: int, prefix: str) -> BuildContext:
        return attrs.evolve(ctx, layer=_LayerParts(self, ctx, index, prefix))

    def make(self, part: ComponentSpec, ctx: BuildContext, path: str, layer: int | None = None) -> nn.Module:
        key = (part.kind, part.name, part.distribution)
        if key not in self.components:
            self.components[key] = self.registry.get(*key)
        component = self.components[key]
        varied = layer is not None and part != getattr(self.spec, part.kind)
        where = f" (layer {layer})" if varied else ""
        if component is None:
            raise SpecError(Problem(file=self.spec.source, path=f"$.{part.kind}.use",
                                    message=f"{part.kind} {part.use!r} is not available in this registry{where}"))
        if not component.serves_model(self.spec.model):
            raise SpecError(Problem(file=self.spec.source, path="$.model", message=(
                f"{component.qualified_name} does not serve these sizes{where}: it serves {component.constraint}, "
                f"found {_sizes(self.spec.model)}")))
        sized = sized_mismatches(part.config, self.spec.model)  # lists with one entry per head, per pair, ...
        if sized:
            raise SpecError([Problem(file=self.spec.source, path=f"$.{part.kind}.{name}", message=message + where)
                             for name, message in sized])
        try:
            module = component.build(part.config, ctx)
        except SpecError:  # a sublayer the component built through ctx.layer: reported at its own table
            raise
        except (ValueError, TypeError, RuntimeError, OverflowError) as error:  # torch refuses sizes with these
            raise SpecError(Problem(file=self.spec.source, path=f"$.{part.kind}",
                                    message=f"{component.qualified_name} cannot be built{where}: {error}")) from error
        self.provenance[path] = component
        return module


class _LayerParts:
    """``ctx.layer`` of one layer: each call builds the spec's component anew and records it at prefix.name."""

    def __init__(self, assembler: _Assembler, ctx: BuildContext, index: int, prefix: str) -> None:
        self._assembler, self._ctx, self._prefix = assembler, ctx, prefix
        self.index = index
        self.dropout = assembler.spec.model.dropout

    def _path(self, name: str) -> str:
        if not isinstance(name, str) or not name or any(not part.isidentifier() for part in name.split(".")):
            raise ValueError(f"a sublayer's name must be a module attribute path, found {name!r}")
        return f"{self._prefix}.{name}"

    def _make(self, kind: str, ctx: BuildContext, path: str) -> nn.Module:
        part = getattr(self._assembler.spec.layer(self.index), kind)
        return self._assembler.make(part, ctx, path, layer=self.index)

    def attention(self, name: str = "attn") -> nn.Module:
        path = self._path(name)  # attention gets its layer's context too: ctx.layer.index, .dropout
        return self._make("attention", self._assembler.layer_context(self._ctx, self.index, path), path)

    def ffn(self, name: str = "ffn") -> nn.Module:
        path = self._path(name)
        return self._make("ffn", self._assembler.layer_context(self._ctx, self.index, path), path)

    def norm(self, name: str) -> nn.Module:
        return self._make("norm", self._ctx, self._path(name))

    def activation(self, name: str = "act") -> nn.Module:
        return self._make("activation", self._ctx, self._path(name))


def init_weights(model: Transformer, n_layers: int, init: InitConfig | None = None) -> None:
    """Draw what the model's components declare (``assembly/initialisation.py``) as [init] says; by default
    GPT-2's: N(0, 0.02), zero biases, residual projections scaled by 1/sqrt(2L)."""
    init_plan(model).draw(init if init is not None else InitConfig(), n_layers)


def _sizes(model: ModelConfig) -> str:
    """The [model] sizes a size constraint reads, as a refusal quotes them."""
    return (f"d_model = {model.d_model}, n_heads = {model.n_heads}, n_kv_heads = {model.kv_heads}, "
            f"head_dim = {model.head_dim}, d_ff = {model.d_ff}")
