"""gpt-oss (GptOssForCausalLM): parity with transformers (sinks, alternating windows, a biased router, experts
with biases stored transposed and interleaved, the clamped SwiGLU, YaRN), released and default counts, refusals."""

from __future__ import annotations

import pytest

from blockspec.interop.families import family_named

from .hf_parity import check_family, check_swaps_are_caught, counted, refused, structured, tiny, transformers

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

SMALL = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=24, head_dim=8,
             num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64, sliding_window=5)
CASES = {  # the default layer types, yarn and biases; every layer full, no attention bias, a plain rope, tied
    "gqa-alternating-yarn-v61": dict(vocab_size=61, num_key_value_heads=2),
    "mqa-full-unbiased-tied-v53": dict(vocab_size=53, num_key_value_heads=1, attention_bias=False,
                                       tie_word_embeddings=True, layer_types=["full_attention"] * 3,
                                       swiglu_limit=3.0, rope_parameters={"rope_type": "default", "rope_theta": 500.0}),
}
GPT_OSS_20B = {  # openai/gpt-oss-20b config.json's keys (the weights as released are MXFP4: see the refusal below)
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0, "eos_token_id": 200002,
    "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096,
    "initializer_range": 0.02, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 12, "max_position_embeddings": 131072,
    "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24,
    "num_key_value_heads": 8, "num_local_experts": 32, "output_router_logits": False, "pad_token_id": 199999,
    "rms_norm_eps": 1e-05, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                            "original_max_position_embeddings": 4096, "rope_type": "yarn",
                                            "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "use_cache": True, "vocab_size": 201088,
}


@pytest.mark.parametrize("case", CASES)
def test_parity_import_checkpoint_export(case, tmp_path, registry):
    hf_model = tiny("GptOss", **SMALL, **CASES[case])
    imported = check_family(hf_model, tmp_path, registry, length=24)
    spec = imported.spec
    assert spec.attention.config.sinks and spec.ffn.config.router_bias and spec.activation.name == "clamped_swiglu"
    if case.startswith("gqa"):
        assert [spec.layer(i).attention.config.sliding_window for i in range(3)] == [5, None, 5]
        assert spec.positional.config.scaling == "yarn" and spec.positional.config.truncate is False
        check_swaps_are_caught(imported, hf_model, length=24)


def test_the_released_config_counts_as_transformers_and_as_the_example_spec(registry):
    import blockspec

    from .test_example_families import SPECS

    spec, count = counted("GptOss", GPT_OSS_20B, registry)
    assert count == 20_914_757_184
    example = blockspec.load_spec(SPECS / "gpt-oss-20b.toml", registry)
    assert [spec.layer(i).attention.config for i in range(24)] == \
        [example.layer(i).attention.config for i in range(24)]
    assert (spec.ffn.config.n_experts, spec.ffn.config.top_k, spec.activation.config) == \
        (example.ffn.config.n_experts, example.ffn.config.top_k, example.activation.config)


def test_the_default_config_counts_as_transformers(registry):
    spec, _ = counted("GptOss", transformers.GptOssConfig().to_dict(), registry)
    assert spec.positional.config.base == 150000.0 and spec.positional.config.factor == 32.0


def test_a_config_without_rope_keys_takes_gpt_oss_yarn(registry):
    bare = {k: v for k, v in GPT_OSS_20B.items() if k not in ("rope_scaling", "rope_theta")}
    rope = structured(bare, registry).positional.config
    assert (rope.base, rope.scaling, rope.factor, rope.original_context_length, rope.truncate) == \
        (150000.0, "yarn", 32.0, 4096, False)


@pytest.mark.parametrize(("change", "key", "message"), [
    ({"quantization_config": {"quant_method": "mxfp4"}}, "$.quantization_config", "quantized weights"),
    ({"experts_per_token": 2}, "$.experts_per_token", "differs from num_experts_per_tok = 4"),
    ({"layer_types": ["chunked_attention"] * 24}, "$.layer_types", "unsupported layer type"),
    ({"partial_rotary_factor": 0.5}, "$.partial_rotary_factor", "partial RoPE"),
])
def test_what_blockspec_cannot_express_is_refused_at_its_key(change, key, message):
    found = refused({**GPT_OSS_20B, **change})
    assert key in found and message in found


def test_export_needs_the_sinks_and_the_biased_router(registry):
    import attrs

    spec = structured({**GPT_OSS_20B, "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"]},
                      registry)
    family = family_named("gpt_oss")
    assert family.misfits(spec) == []
    unsunk = attrs.evolve(spec, attention=attrs.evolve(spec.attention, config=attrs.evolve(
        spec.attention.config, sinks=False)))
    assert any("sinks = false" in p for p in family.misfits(unsunk))
    unbiased = attrs.evolve(spec, ffn=attrs.evolve(spec.ffn, config=attrs.evolve(spec.ffn.config, router_bias=False)))
    assert any("router_bias = True" in p for p in family.misfits(unbiased))
    assert any("sinks = true" in p for p in family_named("llama").misfits(spec))
