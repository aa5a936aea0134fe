"""Falcon (FalconForCausalLM): parity with transformers for each layer (sequential, parallel with one norm,
the new architecture's two norms) and each fused query_key_value layout (multi-query, one kv head per head,
grouped kv heads as Falcon-40B and 180B have), released and default configs counted as transformers counts
them, refusals."""

from __future__ import annotations

import pytest
import torch

import blockspec
from blockspec.errors import CheckpointError
from blockspec.interop.families import family_for, family_of_architecture
from blockspec.interop.families.falcon import qkv_order
from blockspec.interop.weight_map import output_rows, reordered, to_blockspec, to_hf
from blockspec.interop.hf_config import spec_dict

from .hf_parity import check_family, check_swaps_are_caught, counted, refused, tiny, transformers

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_hidden_size=48,
             max_position_embeddings=64)
CASES = {  # the layer, the kv heads, biases, tying, rope base, activation
    "parallel-one-norm-mqa-bias-v61": dict(vocab_size=61, multi_query=True, parallel_attn=True, bias=True),
    "sequential-mha-untied-v53": dict(vocab_size=53, multi_query=False, parallel_attn=False,
                                      tie_word_embeddings=False, activation="gelu_new",
                                      rope_parameters={"rope_type": "default", "rope_theta": 5e4}),
    "new-two-norms-mha-bias-v57": dict(vocab_size=57, new_decoder_architecture=True, num_kv_heads=4, bias=True),
    "new-one-norm-kv1-v59": dict(vocab_size=59, new_decoder_architecture=True, num_kv_heads=1,
                                 num_ln_in_parallel_attn=1),
    "new-two-norms-gqa2-bias-v61": dict(vocab_size=61, new_decoder_architecture=True, num_kv_heads=2, bias=True),
    "new-one-norm-gqa2-v53": dict(vocab_size=53, new_decoder_architecture=True, num_kv_heads=2,
                                  num_ln_in_parallel_attn=1),
}
KV_HEADS = {"mqa": 1, "kv1": 1, "gqa2": 2}  # the case's name -> its kv heads (else one per head: 4)
FALCON_7B = {  # tiiuae/falcon-7b config.json, as released in the transformers format
    "alibi": False, "apply_residual_connection_post_layernorm": False, "architectures": ["FalconForCausalLM"],
    "attention_dropout": 0.0, "bias": False, "bos_token_id": 11, "eos_token_id": 11, "hidden_dropout": 0.0,
    "hidden_size": 4544, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "falcon",
    "multi_query": True, "new_decoder_architecture": False, "num_attention_heads": 71, "num_hidden_layers": 32,
    "parallel_attn": True, "torch_dtype": "bfloat16", "transformers_version": "4.27.4", "use_cache": True,
    "vocab_size": 65024,
}


@pytest.mark.parametrize("case", CASES)
def test_parity_import_checkpoint_export(case, tmp_path, registry):
    hf_model = tiny("Falcon", **SMALL, pad_token_id=0, bos_token_id=1, eos_token_id=2, **CASES[case])
    imported = check_family(hf_model, tmp_path, registry, length=24)
    assert imported.spec.model.kv_heads == next((n for key, n in KV_HEADS.items() if key in case), 4)
    if "bias" not in case:  # a parallel layer adds its two output biases alike (as Phi's): the tensors tell them
        check_swaps_are_caught(imported, hf_model, length=24)


@pytest.mark.parametrize("config", [FALCON_7B, transformers.FalconConfig().to_dict()],
                         ids=["falcon-7b", "transformers-default"])
def test_released_and_default_configs_import_with_transformers_parameter_count(config, registry):
    spec, _ = counted("Falcon", config, registry)
    assert (spec.block.name, spec.block.config.shared_norm, spec.model.kv_heads) == ("parallel", True, 1)


FALCON_40B = {**FALCON_7B, "hidden_size": 8192, "new_decoder_architecture": True, "num_attention_heads": 128,
              "num_hidden_layers": 60, "num_kv_heads": 8}  # tiiuae/falcon-40b's sizes (8 kv heads of 16 queries)
FALCON_180B = {**FALCON_40B, "hidden_size": 14848, "num_attention_heads": 232, "num_hidden_layers": 80}


@pytest.mark.parametrize("config", [FALCON_40B, FALCON_180B], ids=["falcon-40b", "falcon-180b"])
def test_the_grouped_releases_import_with_two_norms_and_count_as_transformers_does(config, registry):
    spec, count = counted("Falcon", config, registry)
    assert (spec.block.name, spec.block.config.shared_norm, spec.model.kv_heads) == ("parallel", False, 8)
    # what transformers counts (counted() has compared them)
    assert count == {8192: 41_303_293_952, 14848: 178_557_088_768}[config["hidden_size"]]


def test_qkv_order_takes_each_kv_heads_queries_then_every_k_then_every_v():
    assert qkv_order(2, 4) == (0, 1, 4, 5, 2, 6, 3, 7)  # blocks: q0 q1 k0 v0 | q2 q3 k1 v1
    assert qkv_order(1, 3) == (0, 1, 2, 3, 4)  # one kv head: already q | k | v
    assert qkv_order(3, 3) == (0, 3, 6, 1, 4, 7, 2, 5, 8)  # one per head: (heads, 3) regrouped


def test_the_reordered_rule_round_trips_and_moves_a_lora_b_as_its_weight():
    """to_blockspec undoes to_hf, and output_rows (a LoRA B's rows, for peft export) takes the weight's order."""
    rule = reordered("qkv.weight", "query_key_value.weight", qkv_order(2, 4))
    weight = torch.randn(8 * 3, 5)  # 8 blocks of head_dim 3 (4 q, 2 k, 2 v), 5 inputs
    hf = to_hf([rule], {"qkv.weight": weight})["query_key_value.weight"]
    assert torch.equal(to_blockspec([rule], {"query_key_value.weight": hf}.__getitem__)["qkv.weight"], weight)
    assert torch.equal(output_rows(rule, weight)[0], hf)
    assert torch.equal(hf.unflatten(0, (2, 4, 3))[1, 2], weight.unflatten(0, (8, 3))[4 + 1])  # group 1's k is k1


def test_falcon_7b_counts_as_transformers_does(registry):
    """The published 7,217,189,760 counts the tied head (the embedding) twice: 295,469,056 more."""
    assert counted("Falcon", FALCON_7B, registry)[1] == 6_921_720_704


@pytest.mark.parametrize(("change", "key"), [
    ({"alibi": True}, "$.alibi"),
    ({"new_decoder_architecture": True, "num_kv_heads": 3}, "$.num_kv_heads"),  # not a divisor of 4 heads
    ({"multi_query": False, "num_kv_heads": 2}, "$.num_kv_heads"),  # transformers cannot build it
    ({"new_decoder_architecture": True, "parallel_attn": False}, "$.parallel_attn"),
    ({"num_ln_in_parallel_attn": 2}, "$.num_ln_in_parallel_attn"),  # two norms in the old architecture
    ({"apply_residual_connection_post_layernorm": True}, "$.apply_residual_connection_post_layernorm"),
    ({"activation": "tanh"}, "$.activation"),
    ({"partial_rotary_factor": 0.5}, "$.partial_rotary_factor"),
])
def test_keys_it_cannot_express_are_refused_at_the_key(change, key):
    message = refused({"architectures": ["FalconForCausalLM"], **SMALL, "vocab_size": 50, **change})
    assert len(message.splitlines()) == 1 and f"config.json: {key}: " in message


def test_export_refuses_grouped_kv_heads_in_a_sequential_layer(registry):
    """Falcon groups kv heads only in its new architecture, which is parallel."""
    document = spec_dict({"architectures": ["FalconForCausalLM"], **SMALL, "vocab_size": 50, "parallel_attn": False,
                          "multi_query": False}, file="c", name="m")
    document["model"] = {**document["model"], "n_kv_heads": 2}
    misfits = family_of_architecture("FalconForCausalLM").misfits(blockspec.structure_spec(document, registry))
    assert misfits == ["[model] n_kv_heads = 2 with block 'pre': Falcon groups kv heads only in its new "
                       "architecture, which is parallel"]


def test_export_names_the_blocks_falcon_has(registry):
    document = spec_dict({"architectures": ["FalconForCausalLM"], **SMALL, "vocab_size": 50}, file="c", name="m")
    document["block"] = {"use": "sandwich"}
    with pytest.raises(CheckpointError, match=r"as Falcon: block is 'sandwich', expected 'pre' or "
                                              r"'parallel' \(one norm or two\)"):
        family_for(blockspec.structure_spec(document, registry))
