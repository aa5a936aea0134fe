"""litgpt coverage (benchmarks/litgpt_coverage.py): every litgpt named config converts and counts exactly.

Opt-in: litgpt does not share the dev environment, so the slow test reads an unpacked litgpt 0.5.13 wheel
from BLOCKSPEC_LITGPT (docs/litgpt-coverage.md says how to fetch one). The fast tests need nothing outside
the repository: a hand-written Config-like object through the converter.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

import blockspec
from benchmarks.litgpt_convert import Unsupported, convert

LITGPT_ENV = "BLOCKSPEC_LITGPT"


def _config(**changes: object) -> SimpleNamespace:
    """A small Llama-like litgpt Config after __post_init__ (its derived fields filled in)."""
    fields: dict[str, object] = dict(
        name="tiny-llama-like", block_size=64, n_layer=2, n_embd=64, padded_vocab_size=128, n_head=4,
        n_query_groups=2, head_size=16, intermediate_size=96, moe_intermediate_size=None, bias=False,
        attn_bias=True, lm_head_bias=False, norm_class_name="RMSNorm", norm_eps=1e-6, norm_qk=False,
        norm_qk_type="default", post_attention_norm=False, post_mlp_norm=False, norm_1=True, norm_2=True,
        parallel_residual=False, shared_attention_norm=False, mlp_class_name="LLaMAMLP", gelu_approximate="none",
        n_expert=0, n_expert_per_token=0, scale_embeddings=False, final_logit_softcapping=None,
        attention_logit_softcapping=None, attention_scores_scalar=None, sliding_window_size=4,
        sliding_window_indices=[1, 0], rope_base=10000, rope_n_elem=16, rotary_percentage=1.0,
        rope_condense_ratio=1, rope_adjustments=None, rope_local_base_freq=None, rope_indices=None,
        rope_interleave=False, latent_attention=None, n_shared_expert=None, n_expert_groups=None,
        first_k_dense_replace=None, routed_scaling_factor=1.0, norm_topk_prob=False)
    fields.update(changes)
    return SimpleNamespace(**fields)


def test_a_hand_written_config_converts_and_counts(registry):
    """Embedding, head, 2 layers (fused qkv with bias, SwiGLU, 2 RMSNorms), the final norm: by hand."""
    spec = blockspec.loads_spec(convert(_config()), registry)
    qkv = 64 * (4 + 2 * 2) * 16 + (4 + 2 * 2) * 16
    layer = qkv + 64 * 64 + 3 * 64 * 96 + 2 * 64
    assert blockspec.count_parameters(spec, registry).exact == 2 * 128 * 64 + 2 * layer + 64
    assert spec.layer(0).attention.config.sliding_window == 4
    assert spec.layer(1).attention.config.sliding_window is None


def test_an_inexpressible_config_is_refused_by_name():
    """A field with no blockspec counterpart fails naming the field, never as an approximate spec."""
    with pytest.raises(Unsupported, match="norm_1/norm_2"):
        convert(_config(norm_1=False))


@pytest.mark.slow("litgpt coverage: needs an unpacked litgpt wheel in BLOCKSPEC_LITGPT")
def test_every_litgpt_config_converts_and_counts_exactly():
    """The benchmark's target: 210 of 210 litgpt 0.5.13 named configs, each count equal to GPT(config)'s."""
    where = os.environ.get(LITGPT_ENV, "")
    if not where:
        pytest.skip(f"set {LITGPT_ENV} to an unpacked litgpt wheel (docs/litgpt-coverage.md)")
    from benchmarks.litgpt_coverage import run_all, summary

    results = run_all(Path(where))
    assert len(results) >= 210
    assert [r.name for r in results if not r.exact] == [], "\n".join(summary(results))
