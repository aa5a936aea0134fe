"""DeepSeek V3 (DeepseekV3ForCausalLM): parity with transformers (latent attention, sigmoid group-limited routing
with its correction bias, shared experts, dense first layers, YaRN's softmax scale), counts, refusals."""

from __future__ import annotations

import pytest

import blockspec
from blockspec.interop.families import family_named

from .hf_parity import check_family, check_swaps_are_caught, counted, refused, structured, tiny, transformers
from .test_example_families import SPECS

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

SMALL = dict(hidden_size=32, intermediate_size=40, moe_intermediate_size=16, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2, n_group=4,
             topk_group=2, kv_lora_rank=12, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=10,
             max_position_embeddings=64)
CASES = {  # q through its bottleneck or not, interleaved or half rope, YaRN with mscale_all_dim, dense layers or none
    "qlora-interleaved-dense1-shared1-v61": dict(vocab_size=61, q_lora_rank=6, first_k_dense_replace=1,
                                                 n_shared_experts=1),
    "fullq-half-yarn-dense0-shared2-v53": dict(vocab_size=53, q_lora_rank=None, first_k_dense_replace=0,
                                               n_shared_experts=2, rope_interleave=False, norm_topk_prob=False,
                                               routed_scaling_factor=1.5,
                                               rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 5e4,
                                                                "original_max_position_embeddings": 16,
                                                                "mscale": 0.8, "mscale_all_dim": 0.8}),
}
DEEPSEEK_V3 = {  # deepseek-ai/DeepSeek-V3's sizes as transformers' DeepseekV3Config names them
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280,
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
    "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "qk_nope_head_dim": 128, "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "norm_topk_prob": True, "max_position_embeddings": 163840, "rms_norm_eps": 1e-06,
    "rope_interleave": True, "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "num_nextn_predict_layers": 1,
}


@pytest.mark.parametrize("case", CASES)
def test_parity_import_checkpoint_export(case, tmp_path, registry):
    hf_model = tiny("DeepseekV3", **SMALL, **CASES[case])
    imported = check_family(hf_model, tmp_path, registry, length=24)
    spec = imported.spec
    assert spec.attention.name == "mla" and spec.ffn.config.scoring == "sigmoid" and spec.ffn.config.correction_bias
    if case.startswith("qlora"):
        assert [spec.layer(i).ffn.name for i in range(3)] == ["dense", "moe", "moe"]
        check_swaps_are_caught(imported, hf_model, length=24)
    else:
        assert spec.positional.config.layout == "half" and spec.attention.config.query_scale is not None


def test_the_released_sizes_count_as_transformers_and_as_the_example_spec(registry):
    spec, count = counted("DeepseekV3", DEEPSEEK_V3, registry)
    assert count == 671_026_404_352
    example = blockspec.load_spec(SPECS / "deepseek-v3.toml", registry)
    assert spec.attention.config == example.attention.config
    assert (spec.ffn.config, spec.positional.config) == (example.ffn.config, example.positional.config)
    assert [spec.layer(i).ffn.name for i in range(61)] == [example.layer(i).ffn.name for i in range(61)]


def test_the_default_config_counts_as_transformers(registry):
    counted("DeepseekV3", transformers.DeepseekV3Config().to_dict(), registry)


@pytest.mark.parametrize(("change", "key", "message"), [
    ({"num_key_value_heads": 8}, "$.num_key_value_heads", "differs from num_attention_heads = 128"),
    ({"attention_bias": True}, "$.attention_bias", "not supported"),
    ({"first_k_dense_replace": -1}, "$.first_k_dense_replace", "expected an integer >= 0"),
    ({"topk_group": 9}, "$.ffn.topk_group", "expected at most n_group = 8"),
    ({"qk_head_dim": 100}, "$.qk_head_dim", "differs from 192"),
])
def test_what_blockspec_cannot_express_is_refused_at_its_key(change, key, message, registry):
    config = {**DEEPSEEK_V3, **change}
    if key.startswith("$.ffn"):  # a value the spec refuses, once read
        with pytest.raises(blockspec.SpecError, match=message):
            structured(config, registry)
        return
    found = refused(config)
    assert key in found and message in found


def test_export_needs_the_dense_layers_first_and_the_latent_norms_eps(registry):
    import attrs

    spec = structured({**DEEPSEEK_V3, "num_hidden_layers": 5}, registry)
    family = family_named("deepseek_v3")
    assert family.misfits(spec) == []
    late = attrs.evolve(spec, layers=(attrs.evolve(spec.layers[0], start=2, stop=3),))
    assert any("not the first ones" in p for p in family.misfits(late))
    eps = attrs.evolve(spec, attention=attrs.evolve(spec.attention, config=attrs.evolve(
        spec.attention.config, latent_norm_eps=1e-5)))
    assert any("latent_norm_eps" in p for p in family.misfits(eps))
    assert any("attention is 'mla'" in p for p in family_named("llama").misfits(spec))
