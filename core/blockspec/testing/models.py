"""Whole models for a plugin's own tests: what the kit's properties cannot know, checked in a model."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from blockspec.modules.transformer import Transformer
    from blockspec.registry.components import Registry


def build_model(spec_text: str, *, seed: int = 0, registry: Registry | None = None) -> Transformer:
    """The model a TOML spec describes, built from the installed plugins (or ``registry``), under ``seed``.

    For plugin tests that check components inside a model (causality with a real partner, a
    paper's exact numbers); the same path ``blockspec.load_registry``, ``loads_spec`` and
    ``build`` take. Needs no hypothesis.
    """
    from blockspec.assembly.assemble import build
    from blockspec.registry.loading import load_registry
    from blockspec.registry.specs import loads_spec

    registry = load_registry() if registry is None else registry
    return build(loads_spec(spec_text, registry), registry=registry, seed=seed)
