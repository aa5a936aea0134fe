"""What `blockspec trace` says about a stage: its shape in the stream's terms and the op its component computes.

Issue 28's findings: the MoE experts stage showed a (B·N, d) tensor as shape `128`, and the op
text of Gemma-style attention ignored the sliding window and the query scale.
"""

from __future__ import annotations

import pytest
import torch

import blockspec
from blockspec.inspect.trace import trace

pytestmark = pytest.mark.usefixtures("one_thread")

MODEL = {"vocab_size": 23, "context_length": 16, "d_model": 16, "n_layers": 2, "n_heads": 4, "d_ff": 24}


def spec_of(registry, *, attention: dict | None = None, ffn: dict | None = None, layers: list | None = None,
            **model) -> blockspec.ModelSpec:
    document = {"model": {**MODEL, **model}, "positional": {"use": "rope"}, "norm": {"use": "rmsnorm"},
                "activation": {"use": "swiglu"}, "head": {"use": "lm"}}
    if attention is not None:
        document["attention"] = {"use": "causal", **attention}
    if ffn is not None:
        document["ffn"] = ffn
    if layers is not None:
        document["layers"] = layers
    return blockspec.structure_spec(document, registry)


def traced(registry, n_tokens: int = 5, **options):
    model = blockspec.build(spec_of(registry, **options), registry=registry, seed=0).eval()
    return trace(model, torch.arange(n_tokens)[None] % 23)


# -- tap shapes follow the stream's (B, N, d) -------------------------------------------------------------


def test_the_experts_stages_read_n_by_d_like_every_other_stage(registry):
    moe = {"use": "moe", "n_experts": 4, "top_k": 2, "n_shared_experts": 1}
    result = trace(blockspec.build(spec_of(registry, ffn=moe), registry=registry, seed=0).eval(),
                   torch.arange(10).view(2, 5) % 23)  # a batch of 2: (B·N, d) would read as 10 x 16
    for name in ("blocks.0.ffn.experts", "blocks.0.ffn.shared", "blocks.0.ffn.router"):
        assert result[name].tensor.shape[:2] == (2, 5), name
    assert result["blocks.0.ffn.experts"].shape == (5, 16)  # main: (16,), the flattened tokens' first row gone
    assert result["blocks.0.ffn.shared"].shape == (5, 16)
    assert result["blocks.0.ffn.router"].shape == (5, 4)


def test_the_experts_stages_add_up_to_the_mixtures_output(registry):
    moe = {"use": "moe", "n_experts": 4, "top_k": 2, "n_shared_experts": 1}
    result = traced(registry, ffn=moe)
    total = result["blocks.0.ffn.experts"].tensor + result["blocks.0.ffn.shared"].tensor  # (B, N, d)
    residual = result["blocks.0.ffn_residual"].tensor - result["blocks.0.attn_residual"].tensor
    assert torch.allclose(total, residual, atol=1e-6)


def test_the_shared_experts_stage_is_credited_to_the_mixture(registry):
    result = traced(registry, ffn={"use": "moe", "n_experts": 2, "top_k": 1, "n_shared_experts": 1})
    stage = result["blocks.0.ffn.shared"]
    assert (stage.component, stage.distribution) == ("ffn:moe", "blockspec-moe")  # main: None, None ("?")


# -- op text from the component's own options -------------------------------------------------------------


def test_plain_attention_keeps_its_op_text(registry):
    result = traced(registry)
    assert result["blocks.0.attn.weights"].op == "softmax(q·kᵀ/√hs + mask): weights per head, causally masked"
    assert result["blocks.0.attn.heads"].op == "weights @ v, per head (SDPA)"


def test_gemma_style_attention_says_its_window_scale_and_cap(registry):
    attention = {"sliding_window": 3, "query_scale": 0.0625, "logit_softcap": 50.0}
    layers = [{"every": 2, "offset": 1, "attention": {"use": "causal", "query_scale": 0.0625,
                                                       "logit_softcap": 50.0}}]
    result = traced(registry, attention=attention, layers=layers)
    sliding, full = result["blocks.0.attn.weights"].op, result["blocks.1.attn.weights"].op
    assert "window 3" in sliding and "0.0625" in sliding and "50" in sliding
    assert "window" not in full and "0.0625" in full
    assert "√hs" not in sliding + full  # main: "softmax(q·kᵀ/√hs + mask)" whatever the scale
    scores = result["blocks.0.attn.scores"].op
    assert "0.0625" in scores and "50" in scores
    assert "SDPA" not in result["blocks.0.attn.heads"].op  # a capped softmax is explicit, not SDPA


def test_qk_norm_and_a_score_bias_show_in_the_weights_text(registry):
    result = traced(registry, attention={"qk_norm": "head", "sliding_window": 2})
    assert "window 2" in result["blocks.0.attn.weights"].op
    assert "per head" in result["blocks.0.attn.q_norm"].op
    over_all = traced(registry, attention={"qk_norm": "all"})
    assert "all heads" in over_all["blocks.0.attn.q_norm"].op


def test_the_experts_op_text_says_how_many_experts_a_token_meets(registry):
    result = traced(registry, ffn={"use": "moe", "n_experts": 4, "top_k": 2, "n_shared_experts": 1,
                                   "shared_gate": True})
    assert result["blocks.0.ffn.experts"].op.startswith("top-2 of 4 experts of SwiGLU")  # main: "top-k experts"
    assert result["blocks.0.ffn.shared"].op == "shared experts: SharedExperts, sigmoid-gated"
