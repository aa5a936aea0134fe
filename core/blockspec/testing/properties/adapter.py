"""Adapters: what wraps one linear layer of a built model. Fresh, it is that layer; merged, one plain layer.

Each adapter is built around the harness's linear layer (``adapter_target``) and compared with an
untouched copy of it (``Built.base``): the wrapper must compute the layer it was given, keep it as
``base_layer``, fold into one ``nn.Linear`` with ``merged()``, and leave only its own parameters
trainable when the base is frozen.
"""

from __future__ import annotations

import torch
from torch import nn

from blockspec.modules.adapter import Adapter, freeze_base
from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.harness import build_isolated, exercise, inputs
from blockspec.testing.properties.base import Property, assert_close, assert_like, assert_shape

# Built in float32 and moved to the case's dtype: what an adapter read off the weights when built (DoRA's
# magnitude, ‖W‖ per row) keeps float32's rounding, so "exactly" is to float32's unit roundoff, ~6e-8.
IDENTITY_RTOL = 1e-6
MERGE_TOLERANCE = {"float64": dict(atol=1e-10, rtol=1e-10), "float32": dict(atol=1e-4, rtol=1e-4)}


def check_contract(component: Component, case: Case, device: str) -> None:
    """An ``Adapter`` holding the linear layer it was given as ``base_layer``; [..., in] -> [..., out] like x."""
    built, (x,), found = exercise(component, case, device)
    module = built.module
    if not isinstance(module, Adapter):
        raise AssertionError(f"built a {type(module).__name__}, not a blockspec.plugin.Adapter")
    if not isinstance(module.base_layer, nn.Linear) or module.base_layer.weight.shape != built.base.weight.shape:
        raise AssertionError("base_layer is not the nn.Linear the adapter was given (ctx.target)")
    assert_shape(found["output"], (*x.shape[:-1], built.base.out_features), "adapter(x)")
    assert_like(found["output"], x, "adapter(x)")


def check_identity_at_init(component: Component, case: Case, device: str) -> None:
    """Freshly built, the adapted layer computes what the layer it wraps does (eval mode), to float32 rounding."""
    built = build_isolated(component, case, device=device)
    (x,) = inputs(component.kind, built.module, case, device)
    with torch.no_grad():
        found, expected = built.module(x), built.base(x)
    scale = expected.double().abs().max().item() if expected.numel() else 0.0
    assert_close(found, expected, "a fresh adapter(x) vs the wrapped layer(x)", atol=IDENTITY_RTOL * max(scale, 1e-30),
                 rtol=0)


def check_mergeable(component: Component, case: Case, device: str) -> None:
    """merged() is a plain nn.Linear computing the adapter's eval-mode outputs, and leaves the adapter as it was."""
    built = build_isolated(component, case, device=device)
    (x,) = inputs(component.kind, built.module, case, device)
    with torch.no_grad():
        before = built.module(x)
        merged = built.module.merged()
        after = built.module(x)
        folded = merged(x)
    if type(merged) is not nn.Linear:
        raise AssertionError(f"merged() returned a {type(merged).__name__}, not a plain nn.Linear")
    assert_close(after, before, "adapter(x) after merged() vs before", atol=0, rtol=0)
    tolerance = MERGE_TOLERANCE.get(case.dtype, MERGE_TOLERANCE["float32"])
    assert_close(folded, before, "merged()(x) vs adapter(x)", **tolerance)


def check_frozen_base(component: Component, case: Case, device: str) -> None:
    """With the base frozen (``freeze_base``), only the adapter's own parameters require and receive gradients:
    none of the wrapped layer's, wherever the adapter keeps them."""
    built = build_isolated(component, case, device=device)
    module = built.module.train()
    freeze_base(module)
    trainable = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
    leaked = sorted(name for name, p in trainable if id(p) in built.given)
    if leaked:
        raise AssertionError(f"with the base frozen, the wrapped layer's parameters stay trainable as {leaked}")
    if not trainable:
        raise AssertionError("with the base frozen, no parameter is trainable: the adapter has none of its own")
    (x,) = inputs(component.kind, module, case, device)
    module(x).sum().backward()
    touched = sorted(name for name, p in module.named_parameters() if id(p) in built.given and p.grad is not None)
    if touched:
        raise AssertionError(f"with the base frozen, backward reached the wrapped layer's {touched}")


ADAPTER = (
    Property(name="contract", kind="adapter", check=check_contract,
             summary="an Adapter around the layer it was given; [..., in] -> [..., out], dtype and device kept"),
    Property(name="identity_at_init", kind="adapter", promise="identity_at_init", check=check_identity_at_init,
             weights="fresh", summary="freshly built, it computes exactly what the wrapped layer does"),
    Property(name="mergeable", kind="adapter", promise="mergeable", check=check_mergeable,
             summary="merged() is a plain nn.Linear with the adapter's eval-mode outputs"),
    Property(name="frozen_base", kind="adapter", check=check_frozen_base,
             summary="with the base frozen, only the adapter's own parameters train"),
)
