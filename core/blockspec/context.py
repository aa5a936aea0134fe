"""What a component's ``build(config, ctx)`` receives besides its own config."""

from __future__ import annotations

from typing import Any

from attrs import frozen

from .spec import ModelConfig


@frozen(kw_only=True)
class BuildContext:
    """Model-wide sizes, and already-built modules a component may share (the embedding)."""

    model: ModelConfig
    embedding: Any = None  # the token embedding nn.Embedding, for heads that tie to it
