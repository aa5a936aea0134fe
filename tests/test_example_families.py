"""The example specs of the open model families count exactly what the released models hold.

Each figure is the released model's, as ``transformers`` counts it for the released config; the
counts come from the meta device, so a 46.7B mixture of experts costs no memory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import blockspec

SPECS = Path(__file__).resolve().parents[1] / "examples" / "specs"
RELEASED = {
    "pythia-160m": 162_322_944,  # parallel block, partial rotary
    "qwen2.5-0.5b": 494_032_768,  # q/k/v bias without output bias, GQA, tied
    "gemma-2-2b": 2_614_341_888,  # sandwich norms, head_dim 256, (1 + w) RMSNorm, alternating windows
    "olmo-2-1b": 1_484_916_736,  # output norm, qk-norm over all heads
    "mixtral-8x7b": 46_702_792_704,  # mixture of 8 experts, top 2
    "phi-2": 2_779_683_840,  # parallel block with one norm, partial rotary, an output layer with a bias
    "smollm3-3b": 3_075_098_624,  # every fourth layer RoPE-free (NoPE), GQA, tied
    "gemma-3-1b": 999_885_952,  # (1 + w) q/k norms, five sliding layers to one global, a RoPE base for each kind
    "qwen3-30b-a3b": 30_532_122_624,  # 128 experts of width 768, 8 per token, q/k norms per head
    "gpt-oss-20b": 20_914_757_184,  # sinks, alternating windows, biased router and experts, clamped SwiGLU
    "deepseek-v3": 671_026_404_352,  # latent attention, sigmoid group-limited routing, three dense layers
}


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_example_spec_counts_the_released_model_exactly(name, registry):
    spec = blockspec.load_spec(SPECS / f"{name}.toml", registry)
    assert blockspec.count_parameters(spec, registry).exact == RELEASED[name]


def test_gemma_2_alternates_sliding_and_global_layers(registry):
    spec = blockspec.load_spec(SPECS / "gemma-2-2b.toml", registry)
    windows = [spec.layer(i).attention.config.sliding_window for i in range(spec.model.n_layers)]
    assert windows == [4096, None] * 13
    assert all(spec.layer(i).attention.config.logit_softcap == 50.0 for i in range(spec.model.n_layers))


def test_smollm3_skips_rope_on_every_fourth_layer(registry):
    spec = blockspec.load_spec(SPECS / "smollm3-3b.toml", registry)
    assert [spec.layer(i).positional.name for i in range(8)] == ["rope"] * 3 + ["none"] + ["rope"] * 3 + ["none"]


def test_gemma_3_has_five_sliding_layers_to_each_global_one_with_its_own_rope_base(registry):
    spec = blockspec.load_spec(SPECS / "gemma-3-1b.toml", registry)
    layers = [spec.layer(i) for i in range(spec.model.n_layers)]
    assert [layer.attention.config.sliding_window for layer in layers[:12]] == ([512] * 5 + [None]) * 2
    assert [layer.positional.config.base for layer in layers[:6]] == [1e4] * 5 + [1e6]
    assert all(layer.attention.config.qk_norm_offset for layer in layers)


def test_deepseek_v3_has_three_dense_layers_and_latent_attention_with_a_576_wide_cache(registry):
    from blockspec.modules.kv_cache import KVCache

    spec = blockspec.load_spec(SPECS / "deepseek-v3.toml", registry)
    assert [spec.layer(i).ffn.name for i in range(5)] == ["dense"] * 3 + ["moe"] * 2
    model = blockspec.build(spec, registry=registry, device="meta")
    cache = KVCache.for_model(model, batch_size=1, max_length=1, device="meta")
    assert {(layer.keys.shape[1:], layer.values.shape[-1]) for layer in cache.layers} == {((1, 1, 576), 0)}


def test_gpt_oss_slides_on_every_other_layer_with_sinks_everywhere(registry):
    spec = blockspec.load_spec(SPECS / "gpt-oss-20b.toml", registry)
    layers = [spec.layer(i).attention.config for i in range(spec.model.n_layers)]
    assert [layer.sliding_window for layer in layers[:4]] == [128, None, 128, None]
    assert all(layer.sinks for layer in layers)
