"""Plain reference partners, so a whole-model check of one component blames only that component.

A model needs one component of every kind; the kit fills the other slots with these
(no position signal, LayerNorm, GELU, an untied LM head, the core's causal attention, its
pre- or post-norm block and dense FFN).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from attrs import frozen

from blockspec.assembly.context import BuildContext
from blockspec.modules.activation import Activation
from blockspec.registry.components import Component, Registry
from blockspec.spec.schema import ComponentSpec, ModelConfig, ModelSpec

DISTRIBUTION = "blockspec.testing"
NAME = "reference"


@frozen(kw_only=True)
class ReferenceConfig:
    """A reference partner of the conformance kit; it takes no fields."""


def _positional(config: ReferenceConfig, ctx: BuildContext):
    from blockspec.modules.positional import PositionalEncoding

    return PositionalEncoding()


def _norm(config: ReferenceConfig, ctx: BuildContext):
    from torch import nn

    return nn.LayerNorm(ctx.model.d_model)


class ReferenceGELU(Activation):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def _activation(config: ReferenceConfig, ctx: BuildContext):
    return ReferenceGELU()


def _head(config: ReferenceConfig, ctx: BuildContext):
    from torch import nn

    from blockspec.assembly.initialisation import declare_init

    return declare_init(nn.Linear(ctx.model.d_model, ctx.model.vocab_size, bias=False), {"weight": "std"})


def _attention(config: ReferenceConfig, ctx: BuildContext):
    from blockspec.assembly.builtin import CausalAttentionConfig, build_causal_attention

    return build_causal_attention(CausalAttentionConfig(), ctx)


def _block(config: ReferenceConfig, ctx: BuildContext):
    from blockspec.modules.blocks import PostNormBlock, PreNormBlock

    layer = ctx.layer
    if ctx.model.norm_placement == "post":
        return PostNormBlock(attn=layer.attention("attn"), norm1=layer.norm("norm1"), ffn=layer.ffn("ffn"),
                             norm2=layer.norm("norm2"), dropout=layer.dropout)
    return PreNormBlock(norm1=layer.norm("norm1"), attn=layer.attention("attn"), norm2=layer.norm("norm2"),
                        ffn=layer.ffn("ffn"), dropout=layer.dropout)


def _ffn(config: ReferenceConfig, ctx: BuildContext):
    from blockspec.assembly.builtin import DenseFFNConfig, build_dense_ffn

    return build_dense_ffn(DenseFFNConfig(), ctx)


_BUILDERS = {
    "positional": (_positional, ("unbounded",)),
    "norm": (_norm, ("scale_invariant", "shift_invariant", "standardizes")),
    "activation": (_activation, ("elementwise",)),
    "head": (_head, ("lm",)),
    "attention": (_attention, ("causal",)),
    "block": (_block, ("causal",)),  # pre-norm or post-norm, as the case's norm_placement says
    "ffn": (_ffn, ("position_wise",)),
}


def partner(kind: str) -> Component:
    build, promises = _BUILDERS[kind]
    return Component(kind=kind, name=NAME, config_cls=ReferenceConfig, build=build, distribution=DISTRIBUTION,
                     version="0", summary="conformance-kit reference", promises=frozenset(promises))


def solo_spec(component: Component, config: object, model: ModelConfig) -> tuple[ModelSpec, Registry]:
    """A spec using ``component`` in its own slot and reference partners everywhere else, with its registry."""
    parts, members = {}, [component]
    for kind in _BUILDERS:
        if kind == component.kind:
            parts[kind] = ComponentSpec(kind=kind, name=component.name, config=config,
                                        distribution=component.distribution)
        else:
            members.append(partner(kind))
            parts[kind] = ComponentSpec(kind=kind, name=NAME, config=ReferenceConfig(), distribution=DISTRIBUTION)
    return ModelSpec(model=model, source=f"<{component.kind}:{component.name} with reference partners>",
                     **parts), Registry.of(members)
