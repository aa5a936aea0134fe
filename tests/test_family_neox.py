"""GPT-NeoX / Pythia (GPTNeoXForCausalLM): parity with transformers, config.json as released and as
transformers 4 and 5 write it, parameter counts, refusals, and the per-head q/k/v regrouping rule."""

from __future__ import annotations

import pytest
import torch

import blockspec
from blockspec.assembly.counting import count_parameters
from blockspec.interop.families import family_named
from blockspec.interop.hf_config import spec_dict
from blockspec.interop.weight_map import regrouped, to_blockspec, to_hf

from .hf_parity import (as_older_transformers, check_family, check_import, check_swaps_are_caught, export_count,
                        counted, refused, structured, tiny, transformers)

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=64)
CASES = {  # every feature: parallel or sequential layers, rotated fraction, attention biases, tying, activation
    "parallel-quarter-untied-v61": dict(vocab_size=61),
    "sequential-half-tied-no_attention_bias-gelu_new-v53": dict(
        vocab_size=53, use_parallel_residual=False, attention_bias=False, tie_word_embeddings=True,
        hidden_act="gelu_new", rope_parameters={"rope_type": "default", "rope_theta": 500.0,
                                                "partial_rotary_factor": 0.5}),
    "parallel-full-relu-v47": dict(vocab_size=47, hidden_act="relu",
                                   rope_parameters={"rope_type": "default", "partial_rotary_factor": 1.0}),
}
PYTHIA_1_4B = {  # EleutherAI/pythia-1.4b config.json, as released (transformers 4.24)
    "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "gelu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192, "layer_norm_eps": 1e-05,
    "max_position_embeddings": 2048, "model_type": "gpt_neox", "num_attention_heads": 16,
    "num_hidden_layers": 24, "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False,
    "torch_dtype": "float16", "transformers_version": "4.24.0", "use_cache": True, "use_parallel_residual": True,
    "vocab_size": 50304,
}


@pytest.mark.parametrize("case", CASES)
def test_parity_import_checkpoint_export(case, tmp_path, registry):
    hf_model = tiny("GPTNeoX", **SMALL, **CASES[case])
    imported = check_family(hf_model, tmp_path, registry, length=24)
    assert (imported.spec.block.name == "parallel") == hf_model.config.use_parallel_residual
    if case.startswith("parallel-quarter"):
        check_swaps_are_caught(imported, hf_model, length=24)


def test_transformers_4_files_import_the_same_model(tmp_path, registry):
    """Pythia as released: rotary_emb_base/rotary_pct instead of rope_parameters, no attention_bias, the
    attention mask and inv_freq buffers saved, and (transformers 5's memory name) the head as lm_head."""
    from safetensors.torch import load_file, save_file

    hf_model = tiny("GPTNeoX", **SMALL, vocab_size=61, rope_parameters={"rope_theta": 2000.0,
                                                                         "partial_rotary_factor": 0.5})
    hf_model.save_pretrained(tmp_path)
    as_older_transformers(tmp_path, "rope_theta", "attention_bias", rotary_emb_base=2000, rotary_pct=0.5,
                          torch_dtype="float32")
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["lm_head.weight"] = tensors.pop("embed_out.weight")
    for i in range(2):
        tensors[f"gpt_neox.layers.{i}.attention.bias"] = torch.ones(1, 1, 64, 64, dtype=torch.bool).tril()
        tensors[f"gpt_neox.layers.{i}.attention.masked_bias"] = torch.tensor(-1e9)
        tensors[f"gpt_neox.layers.{i}.attention.rotary_emb.inv_freq"] = torch.ones(2)
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    imported = check_import(hf_model, tmp_path, registry, length=24, what="transformers 4 layout")
    assert (imported.spec.positional.config.base, imported.spec.positional.config.fraction) == (2000.0, 0.5)


@pytest.mark.parametrize("config", [PYTHIA_1_4B, transformers.GPTNeoXConfig().to_dict()],
                         ids=["pythia-1.4b", "transformers-default"])
def test_released_and_default_configs_import_with_transformers_parameter_count(config, registry):
    spec, _ = counted("GPTNeoX", config, registry)
    assert (spec.block.name, spec.positional.config.fraction, spec.head.config.tied) == ("parallel", 0.25, False)


def test_pythia_1_4b_counts_as_the_issue_says(registry):
    assert count_parameters(structured(PYTHIA_1_4B, registry), registry).exact == 1_414_647_808


def test_small_config_counts_as_transformers_does(registry):
    config = {"architectures": ["GPTNeoXForCausalLM"], **SMALL, **CASES["sequential-half-tied-no_attention_bias"
                                                                      "-gelu_new-v53"]}
    counted("GPTNeoX", config, registry)


def test_the_pythia_example_spec_exports_as_gpt_neox_with_its_count(registry, example_spec):
    assert export_count(example_spec("pythia-160m"), "gpt_neox", "GPTNeoX", registry) == 162_322_944


@pytest.mark.parametrize(("change", "key"), [
    ({"rotary_pct": 0.375}, "$.rotary_pct"),  # 3 of head_dim 8: an odd number of features rotate
    ({"rope_theta": 5e5}, "$.rope_theta"),  # transformers' GPT-NeoX reads rotary_emb_base, not rope_theta
    ({"partial_rotary_factor": 0.5}, "$.partial_rotary_factor"),  # nor this, next to rotary_pct
    ({"hidden_act": "gelu_10"}, "$.hidden_act"),
    ({"rope_scaling_factor": 2.0}, "$.rope_scaling_factor"),  # unknown: cannot tell what it changes
])
def test_keys_it_cannot_express_are_refused_at_the_key(change, key):
    config = {"architectures": ["GPTNeoXForCausalLM"], **SMALL, "vocab_size": 50, "rotary_pct": 0.25, **change}
    message = refused(config)
    assert len(message.splitlines()) == 1 and f"config.json: {key}: " in message


def test_export_names_what_gpt_neox_cannot_hold(registry):
    document = spec_dict({"architectures": ["GPTNeoXForCausalLM"], **SMALL, "vocab_size": 50}, file="c", name="m")
    shared = blockspec.structure_spec({**document, "block": {"use": "parallel", "shared_norm": True}}, registry)
    assert any("expected 'parallel' (two norms)" in p for p in family_named("gpt_neox").misfits(shared))


def test_regrouping_rule_reorders_per_head_qkv_rows_both_ways():
    heads, head_dim = 2, 3
    hf = torch.arange(heads * 3 * head_dim * 4, dtype=torch.float32).reshape(-1, 4)  # (heads·3·head_dim, d)
    rule = regrouped("qkv", "query_key_value", (heads, 3))
    ours = to_blockspec([rule], {"query_key_value": hf}.__getitem__)["qkv"]
    per_head = hf.reshape(heads, 3, head_dim, 4)  # (heads, q|k|v, head_dim, d)
    assert torch.equal(ours, per_head.transpose(0, 1).reshape(-1, 4))  # (q|k|v, heads, head_dim) rows
    assert torch.equal(to_hf([rule], {"qkv": ours})["query_key_value"], hf)
    bias = torch.arange(heads * 3 * head_dim, dtype=torch.float32)  # (heads·3·head_dim,)
    assert torch.equal(to_hf([rule], to_blockspec([rule], {"query_key_value": bias}.__getitem__))["query_key_value"],
                       bias)
