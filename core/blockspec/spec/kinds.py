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
        "block": "one layer's wiring: sublayers, norms and residuals, [B, N, d] -> [B, N, d]",
        "ffn": "position-wise feed-forward network: [B, N, d] -> [B, N, d]",
    }
)

KINDS: tuple[str, ...] = tuple(KIND_SUMMARIES)

# Section of the spec that selects each kind (same names, kept explicit).
SECTIONS: tuple[str, ...] = KINDS

PROMISES = MappingProxyType(
    {
        "positional": frozenset({"additive", "rotary", "norm_preserving", "score_bias", "relative", "unbounded"}),
        "norm": frozenset({"scale_invariant", "shift_invariant", "standardizes", "unit_rms"}),
        "activation": frozenset({"elementwise", "gated"}),
        "head": frozenset({"lm", "tied", "classifier"}),
        "attention": frozenset({"causal"}),
        "block": frozenset({"residual", "causal"}),
        "ffn": frozenset({"position_wise", "mixture"}),
    }
)

# Promises that only make sense with another one of the same kind: registering one without it is refused.
REQUIRES = MappingProxyType({("positional", "norm_preserving"): "rotary"})

# What each promise means, as the conformance kit (blockspec.testing) checks it.
PROMISE_MEANINGS = MappingProxyType(
    {
        ("positional", "additive"): "embed() adds a (N, d) signal to the embeddings",
        ("positional", "rotary"): "rotate() turns q and k by position (the module's rotates flag)",
        ("positional", "norm_preserving"): ("rotate() keeps every q and k vector's length (a pure rotation; "
                                            "xPos-like scaling does not); needs 'rotary'"),
        ("positional", "score_bias"): "score_bias() adds to the attention scores",
        ("positional", "relative"): "what position p+k gets is a fixed function of what p gets, for every p",
        ("positional", "unbounded"): "max_positions is None: any position works",
        ("norm", "scale_invariant"): "norm(c·x) == norm(x) for c > 0",
        ("norm", "shift_invariant"): "norm(x + s) == norm(x) for a per-token constant s",
        ("norm", "standardizes"): "freshly built: every token's output has mean 0 and variance 1",
        ("norm", "unit_rms"): "freshly built: every token's output has root mean square 1",
        ("activation", "elementwise"): ("(..., d_ff) -> (..., d_ff), output feature j of each token computed "
                                        "from input feature j of that token alone"),
        ("activation", "gated"): "(..., 2·d_ff) -> (..., d_ff); the module's ``gated`` flag is set",
        ("head", "lm"): "(B, N, d) -> logits (B, N, |V|), token by token",
        ("head", "tied"): "the output matrix is the token embedding's storage",
        ("head", "classifier"): "(B, N, d) -> (B, C)",
        ("attention", "causal"): "output at position i depends on positions <= i only",
        ("block", "residual"): "with sublayers that output zero, the block is the identity",
        ("block", "causal"): "with causal attention, output at position i depends on positions <= i only",
        ("ffn", "position_wise"): "each token's output depends on that token alone",
        ("ffn", "mixture"): ("a routed mixture of experts (router, top_k, renormalize, up, down, act, "
                             "shared_output; config fields n_experts, top_k): the output is the top-k softmax-weighted "
                             "sum of the chosen experts plus the shared part"),
    }
)
