"""The two RoPE layouts are one model up to a permutation of q/k features: proved, not assumed."""

from __future__ import annotations

import attrs
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import blockspec
from blockspec.interop.rope_layout import interleaved_state_as_half, interleaved_to_half
from blockspec_positional.rope import rotary_angles, rotate

from .conftest import SPECS
from .weights_helpers import llama_spec, randomized


@given(half_dim=st.integers(1, 16), n=st.integers(1, 12), start=st.integers(0, 5000),
       base=st.sampled_from([10000.0, 500000.0, 17.0]), seed=st.integers(0, 2**16))
def test_rotating_then_permuting_equals_permuting_then_rotating(half_dim, n, start, base, seed):
    head_dim = 2 * half_dim
    x = torch.randn(2, 3, n, head_dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    angles = rotary_angles(n, head_dim, base=base, start=start)
    cos, sin = angles.cos(), angles.sin()
    perm = interleaved_to_half(head_dim)
    assert torch.allclose(rotate(x, cos, sin, "interleaved")[..., perm], rotate(x[..., perm], cos, sin, "half"),
                          atol=1e-12)


@given(half_dim=st.integers(1, 16))
def test_the_permutation_is_a_permutation(half_dim):
    perm = interleaved_to_half(2 * half_dim)
    assert sorted(perm.tolist()) == list(range(2 * half_dim))


@given(kv=st.sampled_from([1, 2, 4]), bias=st.booleans(), seed=st.integers(0, 2**16), start=st.integers(0, 40))
def test_an_interleaved_model_equals_the_half_model_with_permuted_weights(registry, kv, bias, seed, start):
    interleaved = randomized(blockspec.build(llama_spec(registry, kv=kv, bias=bias, layout="interleaved"),
                                             registry=registry), seed=seed)
    half = blockspec.build(llama_spec(registry, kv=kv, bias=bias, layout="half"), registry=registry).eval()
    half.load_state_dict(interleaved_state_as_half(interleaved.state_dict(), interleaved.spec.model))
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        assert torch.allclose(interleaved(ids, start=start), half(ids, start=start), atol=1e-5)
        unpermuted = blockspec.build(half.spec, registry=registry).eval()
        unpermuted.load_state_dict(interleaved.state_dict())
        assert not torch.allclose(interleaved(ids), unpermuted(ids), atol=1e-3)  # the permutation matters


def _assert_exports_exactly(model, hf_class: str, tmp_path) -> None:
    """``model`` exported and loaded by transformers' ``hf_class`` gives its logits."""
    transformers = pytest.importorskip("transformers")
    from blockspec.interop import export_hf

    export_hf(model, tmp_path)
    hf_model = getattr(transformers, hf_class).from_pretrained(tmp_path, attn_implementation="eager").eval()
    ids = torch.arange(20)[None] % model.spec.model.vocab_size
    with torch.no_grad():
        expected = model(ids)
        assert (hf_model(ids).logits - expected).abs().max().item() <= 1e-4 * max(1.0, expected.abs().max().item())


def test_an_interleaved_model_with_qk_norms_exports_as_the_same_olmo2(registry, tmp_path):
    """The q_norm/k_norm scales move with the features they scale: an interleaved OLMo 2 exports exactly."""
    spec = blockspec.load_spec(SPECS / "olmo-2-1b.toml", registry)
    small = attrs.evolve(spec.model, vocab_size=61, d_model=32, n_layers=2, n_heads=4, d_ff=40, context_length=64)
    interleaved = attrs.evolve(spec.positional, config=attrs.evolve(spec.positional.config, layout="interleaved"))
    model = randomized(blockspec.build(attrs.evolve(spec, model=small, positional=interleaved), registry=registry), 5)
    _assert_exports_exactly(model, "Olmo2ForCausalLM", tmp_path)


@pytest.mark.parametrize("kv", [1, 4])
def test_an_interleaved_model_with_its_own_head_dim_exports_as_the_same_llama(registry, tmp_path, kv):
    """q is n_heads·head_dim wide, not d_model: the export splits qkv where the attention does."""
    spec = llama_spec(registry, kv=kv, bias=False, layout="interleaved")
    spec = attrs.evolve(spec, model=attrs.evolve(spec.model, head_dim=12))  # 4 · 12 = 48 != d_model 32
    _assert_exports_exactly(randomized(blockspec.build(spec, registry=registry), seed=7), "LlamaForCausalLM", tmp_path)
