"""What a component's ``build(config, ctx)`` receives besides its own config."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attrs import frozen

from blockspec.spec.schema import ModelConfig

if TYPE_CHECKING:
    from torch import nn


@frozen(kw_only=True)
class BuildContext:
    """Model-wide sizes, and already-built modules a component may share (the embedding)."""

    model: ModelConfig
    embedding: nn.Embedding | None = None  # the token embedding, for heads that tie to it
