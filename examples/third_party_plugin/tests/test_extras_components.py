"""What the kit cannot know: the papers' exact numbers, and the components inside a model."""

from __future__ import annotations

import math

import pytest
import torch

from blockspec.testing import build_model
from blockspec_extras.alibi import alibi_slopes

SPEC = """
[model]
vocab_size = 50
context_length = 16
d_model = 32
n_layers = 2
n_heads = 8
d_ff = 64

[positional]
use = "alibi"

[norm]
use = "scalenorm"

[activation]
use = "squared_relu"

[head]
use = "lm"
tied = true
"""


def test_alibi_slopes_for_eight_heads_are_the_papers():
    assert alibi_slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]


def test_alibi_slopes_for_twelve_heads_interleave_the_next_power_of_two():
    expected = [2.0 ** (-k) for k in range(1, 9)] + [2.0 ** (-k / 2) for k in (1, 3, 5, 7)]
    assert alibi_slopes(12).tolist() == pytest.approx(expected)


def test_alibi_bias_is_slope_times_key_minus_query_distance():
    model = build_model(SPEC, seed=0)
    bias = model.positional.score_bias(3, 3)  # (h, 3, 3)
    assert bias[0].tolist() == [[0.0, 0.5, 1.0], [-0.5, 0.0, 0.5], [-1.0, -0.5, 0.0]]  # masked above the diagonal
    assert bias[7, 2, 0].item() == -2 * 2.0 ** -8


def test_a_model_of_extras_is_causal_and_its_scalenorm_has_unit_rms():
    model = build_model(SPEC, seed=0).eval()
    ids = torch.randint(50, (2, 10), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[:, 6:] = (ids[:, 6:] + 1) % 50
    with torch.no_grad():
        before, after = model(ids), model(changed)
        hidden = model.final_norm(torch.randn(4, 32))
    assert torch.allclose(before[:, :6], after[:, :6], atol=1e-6)
    assert not torch.allclose(before[:, 6:], after[:, 6:])
    assert torch.allclose(hidden.pow(2).mean(-1).sqrt(), torch.ones(4), atol=1e-5)
    assert model.provenance["positional"].distribution == "blockspec-extras"
    assert math.isfinite(before.abs().max().item())


def test_a_rezero_model_starts_as_the_identity_and_learns_its_alphas():
    """With α = 0 every layer passes its input through; the α are the only new parameters."""
    model = build_model(SPEC + '\n[block]\nuse = "rezero"\n', seed=0).eval()
    ids = torch.randint(50, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hidden = model.embedding(ids) + 0  # learned positions are absent: ALiBi adds nothing to embeddings
        for block in model.blocks:
            assert torch.equal(block(hidden, model.positional), hidden)
    assert model.provenance["blocks.0"].qualified_name == "blockspec-extras:rezero"
    alphas = [name for name, _ in model.named_parameters() if "alpha" in name]
    assert alphas == [f"blocks.{i}.alpha_{part}" for i in range(2) for part in ("attn", "ffn")]
    model.train()
    loss = model(ids).logsumexp(-1).mean()
    loss.backward()
    assert model.blocks[1].alpha_ffn.grad is not None and model.blocks[1].alpha_ffn.grad.abs() > 0
