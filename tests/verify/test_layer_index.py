"""Attention receives its layer's context (issue 27, item 8): ``ctx.layer.index`` and ``.dropout``, as blocks and
FFNs do, in an assembled model and when the kit builds it alone."""

from __future__ import annotations

import blockspec
from blockspec.assembly.builtin import CausalAttentionConfig, build_causal_attention
from blockspec.registry.components import Component
from blockspec.spec.schema import ModelConfig
from blockspec.testing import Case
from blockspec.testing.harness import build_isolated
from blockspec.testing.reference import solo_spec

SEEN: list[tuple[int, float]] = []


def recording(config: CausalAttentionConfig, ctx):
    """The core's causal attention, recording the layer index and dropout its context gives."""
    SEEN.append((ctx.layer.index, ctx.layer.dropout))
    return build_causal_attention(config, ctx)


ATTENTION = Component(kind="attention", name="recording", config_cls=CausalAttentionConfig, build=recording,
                      distribution="layers", version="0", promises=frozenset({"causal"}))
MODEL = ModelConfig(name="m", vocab_size=7, context_length=8, d_model=8, n_layers=3, n_heads=2, d_ff=16,
                    dropout=0.1)


def test_attention_sees_each_layers_index_and_dropout_in_an_assembled_model():
    SEEN.clear()
    spec, registry = solo_spec(ATTENTION, CausalAttentionConfig(), MODEL)
    model = blockspec.build(spec, registry=registry, seed=0)
    assert SEEN == [(0, 0.1), (1, 0.1), (2, 0.1)]
    assert model.provenance["blocks.2.attn"] == ATTENTION  # recorded where the block keeps it, as before


def test_attention_built_alone_gets_a_layer_context():
    SEEN.clear()
    build_isolated(ATTENTION, Case(model=MODEL, config=CausalAttentionConfig()))
    assert len(SEEN) == 1 and isinstance(SEEN[0][0], int)

