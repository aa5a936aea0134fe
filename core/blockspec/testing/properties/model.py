"""Whole models around one component (reference partners elsewhere): shapes, causality, exact counts."""

from __future__ import annotations

import attrs
import torch

from blockspec.assembly.assemble import build
from blockspec.spec.kinds import SECTIONS
from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.formulas import model_parameters
from blockspec.testing.harness import build_isolated, perturb
from blockspec.testing.reference import ReferenceConfig, partner, solo_spec
from blockspec.testing.properties.base import (
    LEAK_DTYPES, Property, assert_shape, assert_unchanged, sequence_cases,
)


def solo_model(component: Component, case: Case, device: str, *, meta: bool = False):
    """The component in its slot, reference partners elsewhere; perturbed as trained when the case says so.

    In eval mode, as inference runs it: training-mode randomness (dropout, LayerDrop) would make two forward
    passes of a correct model differ, and every whole-model check compares two passes."""
    spec, registry = solo_spec(component, case.config, case.model)
    model = build(spec, registry=registry, seed=case.seed, device="meta" if meta else device,
                  dtype=getattr(torch, case.dtype))
    if case.trained and not meta:
        perturb(model, case.seed)
    return model.eval()


def token_ids(case: Case, device: str, offset: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(case.seed + offset)
    return torch.randint(case.model.vocab_size, (case.batch, case.tokens), generator=gen).to(device)  # (B, N)


def check_model_shapes(component: Component, case: Case, device: str) -> None:
    """Every tensor from the embedding to the output layer is (B, N, d_model)."""
    model = solo_model(component, case, device)
    seen: list[tuple[str, torch.Tensor]] = []
    watched = [("embedding", model.embedding), ("final_norm", model.final_norm)]
    for index, block in enumerate(model.blocks):
        watched += [(f"blocks.{index}", block)] + [(f"blocks.{index}.{n}", c) for n, c in block.named_children()
                                                   if n != "drop"]
    hooks = [module.register_forward_hook(lambda _m, _i, out, name=name: seen.append((name, out)))
             for name, module in watched]
    try:
        with torch.no_grad():
            logits = model(token_ids(case, device))
    finally:
        for hook in hooks:
            hook.remove()
    expected = (case.batch, case.tokens, case.model.d_model)
    for name, tensor in seen:
        assert_shape(tensor, expected, f"model tensor {name}")
    if component.kind != "head" or "lm" in component.promises:
        assert_shape(logits, (case.batch, case.tokens, case.model.vocab_size), "model logits")


def check_model_causal(component: Component, case: Case, device: str) -> None:
    """Changing tokens after position i leaves the logits at 0..i unchanged, through the whole stack
    (float64, trained weights: a leak of 1e-5 relative size is far above the tolerance)."""
    model = solo_model(component, case, device)
    ids = token_ids(case, device)
    changed = ids.clone()
    changed[:, case.cut + 1:] = token_ids(case, device, offset=13)[:, case.cut + 1:]  # (B, N)
    with torch.no_grad():
        before, after = model(ids), model(changed)
    keep = case.cut + 1
    assert_unchanged(after[:, :keep], before[:, :keep], f"logits at 0..{case.cut} after changing tokens {keep}..")


def check_model_parameters(component: Component, case: Case, device: str) -> None:
    """Meta-device count == real count == the closed form (core formulas + each component's own share)."""
    meta = _count(solo_model(component, case, device, meta=True))
    real_model = solo_model(component, case, device)
    real = _count(real_model)
    act = getattr(getattr(real_model.blocks[0], "ffn", None), "act", None) if len(real_model.blocks) else None
    gated = bool(getattr(act, "gated", False))
    shares = {kind: own_parameters(_part(component, kind), case) for kind in SECTIONS if kind not in ("block", "ffn")}
    ffn = per_layer_parameters(component, case) if component.kind == "ffn" else None
    block = per_layer_parameters(component, case) if component.kind == "block" else None
    formula = model_parameters(case.model, positional=shares["positional"], norm=shares["norm"],
                               attention=shares["attention"], head=shares["head"], gated=gated, ffn=ffn,
                               block=block, activation=shares["activation"])
    if not meta == real == formula:
        raise AssertionError(f"parameter counts disagree: meta device {meta:,}, built {real:,}, "
                             f"closed form {formula:,} (component shares {shares})")


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied matrix once


def _part(component: Component, kind: str) -> tuple[Component, object]:
    return (component, None) if component.kind == kind else (partner(kind), ReferenceConfig())


def per_layer_parameters(component: Component, case: Case) -> list[int]:
    """A block's or FFN's own count in each layer, built alone as that layer: a layer can differ (BLOOM's
    embedding norm in layer 0 only)."""
    return [own_parameters((component, None), case, layer_index=i) for i in range(case.model.n_layers)]


def own_parameters(part: tuple[Component, object], case: Case, *, layer_index: int = 0) -> int:
    """What a component holds when built alone (as the layer at ``layer_index``), minus anything that is the
    embedding's."""
    component, config = part
    solo = case if config is None else attrs.evolve(case, config=config)
    solo = attrs.evolve(solo, norm=None, activation=None,  # the model's own partners: the reference ones
                        layer_index=layer_index)
    built = build_isolated(component, solo, device="meta")
    embedding = built.embedding.weight
    return sum(p.numel() for p in built.module.parameters() if p is not embedding)


def _built_in(component: Component) -> bool:
    """a kind a spec's table builds into the model (an adapter wraps the built model: its own properties)"""
    return component.kind in SECTIONS


def _causal_applies(component: Component) -> bool:
    """a causal model needs an 'lm' head and 'causal' attention"""
    if not _built_in(component):
        return False
    if component.kind == "head":
        return "lm" in component.promises
    if component.kind == "attention":
        return "causal" in component.promises
    return True


MODEL_SHARE = 0.25  # a whole model per example: a quarter of the budget, sizes are what varies

MODEL = (
    Property(name="model_shapes", check=check_model_shapes, share=MODEL_SHARE, when=_built_in,
             summary="in a model: every tensor from embedding to output layer is (B, N, d)"),
    Property(name="model_causal", cases=sequence_cases, check=check_model_causal, when=_causal_applies,
             share=MODEL_SHARE, weights="trained", dtypes=LEAK_DTYPES,
             summary="in a model: logits up to i ignore tokens after i"),
    Property(name="model_parameters", check=check_model_parameters, share=MODEL_SHARE, when=_built_in,
             summary="in a model: meta count == built count == closed form"),
)
