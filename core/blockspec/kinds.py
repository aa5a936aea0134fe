"""The component kinds the assembler knows, and the promises each kind may declare.

Kept free of torch so that discovery, ``list`` and spec checking stay fast.
"""

from __future__ import annotations

from types import MappingProxyType

KIND_SUMMARIES = MappingProxyType(
    {
        "positional": "positions: added to embeddings, rotated into q/k, or biasing scores",
        "norm": "[..., d] -> [..., d] normalisation",
        "activation": "FFN non-linearity: elementwise, or gated (2*d_ff -> d_ff)",
        "head": "output layer: [B, N, d] -> logits [B, N, |V|] or [B, C]",
        "attention": "token mixing: [B, N, d] -> [B, N, d]",
    }
)

KINDS: tuple[str, ...] = tuple(KIND_SUMMARIES)

# Section of the spec that selects each kind (same names, kept explicit).
SECTIONS: tuple[str, ...] = KINDS

PROMISES = MappingProxyType(
    {
        "positional": frozenset({"additive", "rotary", "score_bias", "relative", "unbounded"}),
        "norm": frozenset({"scale_invariant", "shift_invariant"}),
        "activation": frozenset({"elementwise", "gated"}),
        "head": frozenset({"lm", "tied", "classifier"}),
        "attention": frozenset({"causal"}),
    }
)
