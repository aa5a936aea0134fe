"""Qwen3-MoE (Qwen3MoeForCausalLM): parity with transformers (q/k norms per head, softmax top-k routing with and
without norm_topk_prob), per-expert tensors on disk, the released config and its example spec, parameter
counts, refusals."""

from __future__ import annotations

import pytest

import blockspec
from blockspec.errors import CheckpointError
from blockspec.interop.families import family_for
from blockspec.interop.hf_config import spec_dict

from .hf_parity import (check_family, check_swaps_are_caught, counted, export_count, refused, structured, tiny,
                        transformers)
from .test_family_mixtral import tensor_names

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=40,
             max_position_embeddings=64, moe_intermediate_size=24)
CASES = {  # grouped kv heads, head_dim, renormalised or not, window, tying, attention bias, rope base, aux coef
    "gqa-renorm-top2of4-head_dim16-v61": dict(vocab_size=61, num_key_value_heads=2, num_experts=4,
                                               num_experts_per_tok=2, norm_topk_prob=True, head_dim=16),
    "mha-plain-top3of5-window9-tied-bias-v53": dict(vocab_size=53, num_key_value_heads=4, num_experts=5,
                                                     num_experts_per_tok=3, use_sliding_window=True,
                                                     sliding_window=9, tie_word_embeddings=True, attention_bias=True,
                                                     router_aux_loss_coef=0.05,
                                                     rope_parameters={"rope_type": "default", "rope_theta": 5e4}),
}
QWEN3_30B_A3B = {  # Qwen/Qwen3-30B-A3B config.json, as released (transformers 4.51)
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
    "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936,
}


@pytest.mark.parametrize("case", CASES)
def test_parity_import_checkpoint_export(case, tmp_path, registry):
    hf_model = tiny("Qwen3Moe", **SMALL, **CASES[case])
    imported = check_family(hf_model, tmp_path, registry, length=24)
    moe, config = imported.spec.ffn.config, hf_model.config
    assert (moe.n_experts, moe.top_k, moe.renormalize, moe.expert_d_ff) == (
        config.num_experts, config.num_experts_per_tok, config.norm_topk_prob, 24)
    for side in ("hf", "export"):  # experts apart on disk, written back the same way
        names = tensor_names(tmp_path / side)
        assert "model.layers.1.mlp.experts.0.up_proj.weight" in names
        assert not any("gate_up_proj" in name for name in names)
    if case.startswith("gqa"):
        check_swaps_are_caught(imported, hf_model, length=24)


@pytest.mark.parametrize("config", [QWEN3_30B_A3B, transformers.Qwen3MoeConfig().to_dict()],
                         ids=["qwen3-30b-a3b", "transformers-default"])
def test_released_and_default_configs_import_with_transformers_parameter_count(config, registry):
    spec, _ = counted("Qwen3Moe", config, registry)
    assert spec.attention.config.qk_norm == "head" and spec.attention.config.sliding_window is None


def test_qwen3_30b_a3b_counts_as_released_and_imports_as_the_example_spec(registry, example_spec):
    spec = structured(QWEN3_30B_A3B, registry)
    assert blockspec.count_parameters(spec, registry).exact == 30_532_122_624
    example = example_spec("qwen3-30b-a3b")
    assert blockspec.structure_spec({**spec_dict(QWEN3_30B_A3B, file="c", name=example.model.name)}, registry) \
        == example
    assert export_count(example, "qwen3_moe", "Qwen3Moe", registry) == 30_532_122_624


@pytest.mark.parametrize(("change", "key"), [
    ({"decoder_sparse_step": 2}, "$.decoder_sparse_step"),  # dense layers between the sparse ones
    ({"mlp_only_layers": [0]}, "$.mlp_only_layers"),
    ({"layer_types": ["full_attention"] * 2}, "$.layer_types"),  # not a Qwen3MoeConfig key
    ({"partial_rotary_factor": 0.5}, "$.partial_rotary_factor"),
    ({"hidden_act": "gelu"}, "$.hidden_act"),
    ({"shared_expert_intermediate_size": 8}, "$.shared_expert_intermediate_size"),  # Qwen2-MoE's, unknown here
])
def test_keys_it_cannot_express_are_refused_at_the_key(change, key):
    message = refused({"architectures": ["Qwen3MoeForCausalLM"], **SMALL, "vocab_size": 50, **change})
    assert len(message.splitlines()) == 1 and f"config.json: {key}: " in message


@pytest.mark.parametrize(("routing", "words"), [
    ({"n_shared_experts": 1}, "n_shared_experts"), ({"scoring": "sigmoid"}, "scoring"),
    ({"router_bias": True}, "router_bias")])
def test_export_refuses_moe_that_qwen3_moe_does_not_route(routing, words, registry):
    document = spec_dict({"architectures": ["Qwen3MoeForCausalLM"], **SMALL, "vocab_size": 50}, file="c", name="m")
    document["ffn"] = {**document["ffn"], **routing}
    spec = blockspec.structure_spec(document, registry)
    with pytest.raises(CheckpointError, match=f"as Qwen3-MoE: .*{words}"):
        family_for(spec)
