"""What a component's ``build(config, ctx)`` receives besides its own config."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attrs import frozen

from blockspec.spec.schema import ModelConfig

if TYPE_CHECKING:
    from torch import nn


@frozen(kw_only=True)
class BuildContext:
    """Model-wide sizes, and already-built modules a component may share (the embedding).

    ``model`` is the spec's [model] table (d_model, n_heads, head_dim, d_ff, vocab_size, ...).
    ``embedding`` is the model's token embedding, (vocab_size, d_model), always present: a head
    that ties its weight to it holds ``ctx.embedding.weight`` itself.
    """

    model: ModelConfig
    embedding: nn.Embedding
