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
        "adapter": "wraps a built model's linear layer: [..., in] -> [..., out], trainable beside a frozen base",
    }
)

KINDS: tuple[str, ...] = tuple(KIND_SUMMARIES)

# Kinds that wrap modules of the built model instead of being built into it: a spec lists them in an array of
# tables ([[adapters]]), applied after the model is assembled, never one table that selects one component.
WRAPPER_SECTIONS = MappingProxyType({"adapter": "adapters"})

# Section of the spec that selects each built kind (same names, kept explicit).
SECTIONS: tuple[str, ...] = tuple(kind for kind in KINDS if kind not in WRAPPER_SECTIONS)

PROMISES = MappingProxyType(
    {
        "positional": frozenset({"additive", "rotary", "norm_preserving", "score_bias", "relative", "unbounded",
                                 "partial_rotary", "rope_frequencies",
                                 "declared_frequencies", "position_free"}),
        "norm": frozenset({"scale_invariant", "shift_invariant", "standardizes", "unit_rms", "offset_init"}),
        "activation": frozenset({"elementwise", "gated"}),
        "head": frozenset({"lm", "tied", "tie_option", "classifier", "logit_softcap", "logit_columns"}),
        "attention": frozenset({"causal", "sliding_window", "logit_softcap", "qk_norm", "qk_norm_offset",
                                "softmax_heads", "sinks", "sink_option"}),
        "block": frozenset({"residual", "causal", "parallel"}),
        "ffn": frozenset({"position_wise", "mixture",
                          "aux_loss"}),
        "adapter": frozenset({"identity_at_init", "mergeable"}),
    }
)

# Promises any kind may make: about how its module runs, not what it computes.
ANY_KIND_PROMISES = frozenset({"compiles"})
# The block wirings with a formula of their own (beside "parallel", in the table above).
BLOCK_WIRINGS = frozenset({"pre_norm", "post_norm"})
PROMISES = MappingProxyType({kind: promises | ANY_KIND_PROMISES | (BLOCK_WIRINGS if kind == "block" else frozenset())
                             for kind, promises in PROMISES.items()})

# Promises that only make sense with another one of the same kind: registering one without it is refused.
REQUIRES = MappingProxyType({
    ("positional", "norm_preserving"): "rotary",
    ("positional", "partial_rotary"): "rotary",
    ("positional", "rope_frequencies"): "rotary",
    ("positional", "declared_frequencies"): "rotary",
    ("attention", "sinks"): "causal",
    ("attention", "sink_option"): "sinks",
    ("ffn", "aux_loss"): "mixture",
    ("head", "logit_columns"): "lm",
    ("attention", "qk_norm_offset"): "qk_norm",
})

# Promises about an option: the config fields whose values the promise gives a meaning (PROMISE_MEANINGS says
# which), so the kit reads the option from the fields the component chose to promise, never by a field's name
# alone. Registering such a promise with a config class that lacks one of its fields is refused.
ROPE_FIELDS = ("base", "layout", "scaling", "factor", "original_context_length", "low_freq_factor",
               "high_freq_factor", "attention_factor", "beta_fast", "beta_slow", "truncate")
PROMISED_FIELDS = MappingProxyType({
    ("positional", "partial_rotary"): ("fraction",),
    ("positional", "rope_frequencies"): ROPE_FIELDS,
    ("norm", "offset_init"): ("offset",),
    ("head", "tie_option"): ("tied",),
    ("head", "logit_softcap"): ("logit_softcap",),
    ("attention", "sliding_window"): ("sliding_window",),
    ("attention", "logit_softcap"): ("logit_softcap",),
    ("attention", "qk_norm"): ("qk_norm",),
    ("attention", "qk_norm_offset"): ("qk_norm_offset",),
    ("attention", "sink_option"): ("sinks",),
    ("ffn", "mixture"): ("n_experts",),  # top_k: the module's, 1 (a Switch router) without one
})

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
        ("positional", "position_free"): ("attention through the encoder sees the tokens before a query as a set: "
                                          "permuting them leaves the query's output unchanged (NoPE)"),
        ("positional", "partial_rotary"): ("config field `fraction` (1: every feature): below 1, rotate() leaves each "
                                           "head's features past the module's rotary_dim unchanged; needs 'rotary'"),
        ("positional", "rope_frequencies"): ("the config is RoPE's: `base`, `layout` (\"half\" or \"interleaved\"), "
                                             "`scaling` (\"none\", \"linear\", \"dynamic\", \"llama3\", \"yarn\") "
                                             "and its options `factor`, `original_context_length`, `low_freq_factor`, "
                                             "`high_freq_factor`, `attention_factor`, `beta_fast`, `beta_slow`, "
                                             "`truncate`, as transformers' rope types mean them: rotate() turns "
                                             "feature pair i by that scaling's θ_i, cos and sin times yarn's "
                                             "attention factor; needs 'rotary'"),
        ("positional", "declared_frequencies"): ("the module's frequencies(end) gives θ_i of each feature pair "
                                                 "(rotary_dim/2,) for a call whose last position is end - 1, in "
                                                 "its layout (\"half\" or \"interleaved\", default \"half\"): "
                                                 "rotate() turns pair i by θ_i per position, cos and sin at "
                                                 "magnitude 1; needs 'rotary'"),
        ("norm", "scale_invariant"): "norm(c·x) == norm(x) for c > 0",
        ("norm", "shift_invariant"): "norm(x + s) == norm(x) for a per-token constant s",
        ("norm", "standardizes"): "freshly built: every token's output has mean 0 and variance 1",
        ("norm", "unit_rms"): "freshly built: every token's output has root mean square 1",
        ("norm", "offset_init"): ("config field `offset` (bool): true scales by (1 + w) with w stored as 0 when "
                                  "freshly built (Gemma's RMSNorm): the module's weight, if any, is 0 and every "
                                  "token's output has root mean square 1"),
        ("activation", "elementwise"): ("(..., d_ff) -> (..., d_ff), output feature j of each token computed "
                                        "from input feature j of that token alone"),
        ("activation", "gated"): ("(..., 2·d_ff) -> (..., d_ff), output j from input j (its gate) and j + d_ff (its "
                                  "value) alone; the module's ``gated`` flag is set"),
        ("head", "lm"): "(B, N, d) -> logits (B, N, |V|), token by token",
        ("head", "tied"): "the output matrix is the token embedding's storage",
        ("head", "tie_option"): ("config field `tied` (bool): true, the output matrix is the token embedding's "
                                 "storage; false, the head holds its own"),
        ("head", "logit_softcap"): "config field `logit_softcap` c (None: off): no logit exceeds c in magnitude",
        ("head", "logit_columns"): ("the module's logit_columns(x, begin, end) is forward(x)[..., begin:end] for "
                                    "0 <= begin < end <= |V|: logits a slice of the vocabulary at a time, which "
                                    "eval scores without holding every logit; needs 'lm'"),
        ("head", "classifier"): "(B, N, d) -> (B, C)",
        ("attention", "causal"): "output at position i depends on positions <= i only",
        ("attention", "sliding_window"): ("config field `sliding_window` w (None: off): the output at i ignores the "
                                          "tokens before i - w + 1, cached or not"),
        ("attention", "logit_softcap"): ("config field `logit_softcap` c (None: off): no score from the module's "
                                         "scores(q, k) exceeds c in magnitude"),
        ("attention", "qk_norm"): ("config field `qk_norm` (\"none\", \"head\", \"all\"): q and k from "
                                   "project() have root mean square 1 per head (\"head\") or per token over all "
                                   "heads (\"all\"), divided by the learned scales q_norm.weight, k_norm.weight "
                                   "(1 + weight for a norm whose class sets offset = True)"),
        ("attention", "qk_norm_offset"): ("config field `qk_norm_offset` (bool): true, q_norm and k_norm store "
                                          "w = 0 when freshly built and scale by 1 + w (Gemma 3); false, they "
                                          "scale by w; needs 'qk_norm'"),
        ("attention", "softmax_heads"): ("forward(x, positional, start, cache), cached or not, is proj of each "
                                         "head's softmax(scores + mask)·v, with q, k, v from project(), scores "
                                         "= q·kᵀ times the module's scale (default 1/√head_dim), soft-capped, "
                                         "windowed and joined by sinks as promised, kv heads repeated for "
                                         "grouped queries, and the output projection proj"),
        ("attention", "sinks"): ("the module's sinks (n_heads,), where not None, are logits that join every query "
                                 "row's softmax and take no value: weights() rows sum to below 1; needs 'causal'"),
        ("attention", "sink_option"): ("config field `sinks` (bool): true, the module's sinks is a trainable "
                                       "(n_heads,) parameter; false, it is None (no sinks); needs 'sinks'"),
        ("block", "residual"): "with sublayers that output zero, the block is the identity",
        ("block", "causal"): "with causal attention, output at position i depends on positions <= i only",
        ("block", "parallel"): ("block(x) = x + attn(norm1(x)) + ffn(norm2(x)), attn, ffn, norm1 and norm2 the "
                                "sublayers ctx.layer built under those names (no norm2: norm1 serves both)"),
        ("ffn", "position_wise"): "each token's output depends on that token alone",
        ("ffn", "mixture"): ("a routed mixture of experts, as blockspec.plugin's docstring says (router; "
                             "routing(logits) -> (weights, index, probs); top_k, absent: 1; renormalize, absent: "
                             "false; shared_output, absent: nothing shared; the experts as a ModuleList `experts` "
                             "or stacked `up`, `down` in Mixtral's layout with `act`; config field `n_experts`; "
                             "DeepSeek V3's routing, absent: Mixtral's: scoring \"softmax\" or \"sigmoid\", "
                             "n_group / topk_group, routed_scaling, a correction (E,) added for the choice only): "
                             "the output is the sum of the chosen experts, each times its score (renormalised, "
                             "scaled), plus the shared part"),
        ("ffn", "aux_loss"): ("a training-mode forward sets aux_loss, a finite scalar whose gradient reaches "
                              "router.weight; an eval-mode forward sets it to None; needs 'mixture'"),
        ("adapter", "identity_at_init"): "freshly built around a linear layer, it computes exactly what that layer does",
        ("adapter", "mergeable"): ("merged() is a plain nn.Linear that computes, in eval mode, what the adapted "
                                   "layer computes (to float tolerance)"),
    }
)

COMPILES_MEANING = ("torch.compile(module, fullgraph=True) traces a training step, forward and backward, in one graph: "
                    "no graph break, no host sync (.item(), .tolist(), bool(tensor))")
PROMISE_MEANINGS = MappingProxyType({
    **PROMISE_MEANINGS,
    **{(kind, "compiles"): COMPILES_MEANING for kind in KINDS},
    ("block", "pre_norm"): ("block(x) = h + ffn(norm2(h)) with h = x + attn(norm1(x)), attn, ffn, norm1 and norm2 "
                            "the sublayers ctx.layer built under those names"),
    ("block", "post_norm"): ("block(x) = norm2(h + ffn(h)) with h = norm1(x + attn(x)), attn, ffn, norm1 and norm2 "
                             "the sublayers ctx.layer built under those names"),
})
