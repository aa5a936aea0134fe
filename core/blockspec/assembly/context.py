"""What a component's ``build(config, ctx)`` receives besides its own config."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from attrs import frozen

from blockspec.spec.schema import ModelConfig

if TYPE_CHECKING:
    from torch import nn


class LayerParts(Protocol):
    """One layer's factory: builds its sublayers from the spec's components, each call a fresh module.

    ``name`` is where the caller keeps the module, relative to the caller (a block keeps its
    attention at ``"attn"``, so ``attention("attn")`` is recorded as ``blocks.<index>.attn`` in the
    model's provenance). A component built through it (an FFN) gets a factory scoped to its own
    path, so the FFN's ``activation("act")`` is ``blocks.<index>.ffn.act``.
    """

    index: int  # the layer's position in the stack, from 0
    dropout: float  # the spec's [model] dropout: what a block applies to each sublayer's output

    def attention(self, name: str = "attn") -> nn.Module: ...

    def ffn(self, name: str = "ffn") -> nn.Module: ...

    def norm(self, name: str) -> nn.Module: ...

    def activation(self, name: str = "act") -> nn.Module: ...


@frozen(kw_only=True)
class BuildContext:
    """Model-wide sizes, and already-built modules a component may share (the embedding).

    ``model`` is the spec's [model] table (d_model, n_heads, head_dim, d_ff, vocab_size, ...).
    ``embedding`` is the model's token embedding, (vocab_size, d_model), always present: a head
    that ties its weight to it holds ``ctx.embedding.weight`` itself.
    ``layer`` is set for components built per layer (``block``, ``ffn`` and ``attention``): the factory of
    that layer's sublayers (``LayerParts``, with its ``index`` and ``dropout``); None for the model-wide ones.
    """

    model: ModelConfig
    embedding: nn.Embedding
    layer: LayerParts | None = None
    target: nn.Linear | None = None  # an adapter's: the linear layer it wraps; None for every other kind
