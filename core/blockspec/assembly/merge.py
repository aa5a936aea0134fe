"""A model's adapters folded into its base (``merge_adapters``) or taken off it (``unload_adapters``).

Either gives the plain model the spec without its [[adapters]] builds: the spec loses the tables,
``model.adapted`` empties, and the files the model carries stay, so ``save`` writes an ordinary
checkpoint and ``export_hf`` a Hugging Face directory. Both change the model in place, as PEFT's
``merge_and_unload`` and ``unload`` do: a copy of a large model would double its memory, and each
merged layer is made while the others still stand.
"""

from __future__ import annotations

from collections.abc import Callable

from attrs import evolve
from torch import nn

from blockspec.errors import InputError, Problem
from blockspec.modules.adapter import Adapter
from blockspec.modules.transformer import Transformer


def merge_adapters(model: Transformer) -> Transformer:
    """``model`` with every adapter replaced by its ``merged()`` linear layer: what it computes in eval mode."""
    return _replaced(model, lambda adapter: adapter.merged())


def unload_adapters(model: Transformer) -> Transformer:
    """``model`` with every adapter replaced by the layer it wraps, untouched: the base the adapters were
    trained on (what an export for PEFT is loaded onto)."""
    return _replaced(model, lambda adapter: adapter.base_layer)


def _replaced(model: Transformer, plain: Callable[[Adapter], nn.Linear]) -> Transformer:
    adapters = {path: model.get_submodule(path) for path in _adapted(model)}
    assert model.spec is not None, "a model with adapters has the spec that lists them"
    for path, adapter in adapters.items():
        assert isinstance(adapter, Adapter), f"{path}: model.adapted names a {type(adapter).__name__}"
        layer = plain(adapter)
        layer.train(adapter.training)
        parent, _, name = path.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, name, layer)
    model.spec = evolve(model.spec, adapters=())
    model.adapted = {}
    model.base = None  # an adapter checkpoint's base reference: a plain model is saved whole
    return model


def _adapted(model: Transformer) -> list[str]:
    """The adapted module paths; a model without adapters is refused, in one line."""
    paths = list(getattr(model, "adapted", {}) or {})
    if not paths:
        raise InputError(Problem(path="model", expected="a model with adapters (its spec's [[adapters]])",
                                 found="none", hint="a model without adapters is plain already"))
    return paths


__all__ = ["merge_adapters", "unload_adapters"]
