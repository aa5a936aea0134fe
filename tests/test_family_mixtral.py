"""Mixtral (MixtralForCausalLM): parity with transformers (routing included: softmax, top-k, renormalised),
per-expert tensors on disk, config.json as released, parameter counts, refusals, the stacking rule."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

import blockspec
from blockspec.assembly.counting import count_parameters
from blockspec.errors import CheckpointError
from blockspec.interop.families import family_for, family_named
from blockspec.interop.hf_config import spec_dict
from blockspec.interop.weight_map import Rule, per_expert, to_blockspec, to_hf

from .hf_parity import (check_family, check_swaps_are_caught, counted, export_count, refused, structured, tiny,
                        transformers)

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=24,
             max_position_embeddings=64)
CASES = {  # every feature: grouped kv heads, sliding window, top-k of E, head_dim, tying, rope base, aux coef
    "gqa-window9-top2of4-v61": dict(vocab_size=61, num_key_value_heads=2, sliding_window=9, num_local_experts=4,
                                    num_experts_per_tok=2),
    "mha-tied-top1of3-head_dim16-v53": dict(vocab_size=53, num_key_value_heads=4, tie_word_embeddings=True,
                                            num_local_experts=3, num_experts_per_tok=1, head_dim=16,
                                            router_aux_loss_coef=0.05,
                                            rope_parameters={"rope_type": "default", "rope_theta": 5e4}),
}
MIXTRAL_8X7B = {  # mistralai/Mixtral-8x7B-v0.1 config.json, as released (transformers 4.36)
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
    "rms_norm_eps": 1e-05, "rope_theta": 1e6, "router_aux_loss_coef": 0.02, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.36.0.dev0",
    "use_cache": True, "vocab_size": 32000,
}


def tensor_names(path) -> set[str]:
    with safe_open(path / "model.safetensors", "pt") as file:
        return set(file.keys())


@pytest.mark.parametrize("case", CASES)
def test_parity_import_checkpoint_export(case, tmp_path, registry):
    hf_model = tiny("Mixtral", **SMALL, **CASES[case])
    imported = check_family(hf_model, tmp_path, registry, length=24)
    moe = imported.spec.ffn.config
    assert (moe.n_experts, moe.top_k, moe.renormalize) == (hf_model.config.num_local_experts,
                                                           hf_model.config.num_experts_per_tok, True)
    for side in ("hf", "export"):  # experts apart on disk, written back the same way
        names = tensor_names(tmp_path / side)
        assert "model.layers.1.block_sparse_moe.experts.0.w3.weight" in names
        assert not any("gate_up_proj" in name for name in names)
    if case.startswith("gqa"):
        check_swaps_are_caught(imported, hf_model, length=24)


@pytest.mark.parametrize("config", [MIXTRAL_8X7B, transformers.MixtralConfig().to_dict()],
                         ids=["mixtral-8x7b", "transformers-default"])
def test_released_and_default_configs_import_with_transformers_parameter_count(config, registry):
    spec, _ = counted("Mixtral", config, registry)
    assert spec.positional.config.base == 1e6


def test_mixtral_8x7b_counts_as_released(registry):
    spec = structured(MIXTRAL_8X7B, registry)
    assert count_parameters(spec, registry).exact == 46_702_792_704
    assert (spec.ffn.config.aux_loss_coef, spec.attention.config.sliding_window) == (0.02, None)


def test_small_config_counts_as_transformers_does_and_a_missing_base_is_mixtrals(registry):
    config = {"architectures": ["MixtralForCausalLM"], **SMALL, **CASES["gqa-window9-top2of4-v61"]}
    spec, _ = counted("Mixtral", config, registry)
    assert spec.positional.config.base == 1e6  # MixtralConfig's default rope_theta, not 10000


def test_the_mixtral_example_spec_exports_as_mixtral_with_its_count(registry, example_spec):
    assert export_count(example_spec("mixtral-8x7b"), "mixtral", "Mixtral", registry) == 46_702_792_704


@pytest.mark.parametrize(("change", "key"), [
    ({"router_jitter_noise": 0.1}, "$.router_jitter_noise"),  # training noise blockspec-moe does not add
    ({"partial_rotary_factor": 0.5}, "$.partial_rotary_factor"),
    ({"hidden_act": "gelu"}, "$.hidden_act"),
    ({"num_shared_experts": 1}, "$.num_shared_experts"),  # unknown: cannot tell what it changes
])
def test_keys_it_cannot_express_are_refused_at_the_key(change, key):
    message = refused({"architectures": ["MixtralForCausalLM"], **SMALL, "vocab_size": 50, **change})
    assert len(message.splitlines()) == 1 and f"config.json: {key}: " in message


@pytest.mark.parametrize("option", [{"renormalize": False}, {"scoring": "sigmoid"}, {"router_bias": True},
                                    {"routed_scaling": 2.5}, {"correction_bias": True}, {"n_shared_experts": 1}])
def test_export_refuses_moe_that_mixtral_does_not_route(option, registry):
    document = spec_dict({"architectures": ["MixtralForCausalLM"], **SMALL, "vocab_size": 50}, file="c", name="m")
    document["ffn"] = {**document["ffn"], **option}
    spec = blockspec.structure_spec(document, registry)
    (name, value), = option.items()
    assert any(f"{name} = " in p and name in p for p in family_named("mixtral").misfits(spec))
    if name != "router_bias":  # gpt-oss's router has a bias: it takes that one
        with pytest.raises(CheckpointError, match=f"as Mixtral: .*{name}"):
            family_for(spec)


def test_stacking_rule_stacks_each_experts_concatenation_both_ways():
    w = {f"e{e}.{p}": torch.randn(3 if p != "w2" else 2, 4) for e in range(2) for p in ("w1", "w2", "w3")}
    up = per_expert("up", [(f"e{e}.w1", f"e{e}.w3") for e in range(2)], (3, 3))
    down = per_expert("down", [(f"e{e}.w2",) for e in range(2)])
    ours = to_blockspec([up, down], w.__getitem__)
    assert ours["up"].shape == (2, 6, 4) and ours["down"].shape == (2, 2, 4)
    assert torch.equal(ours["up"][1], torch.cat([w["e1.w1"], w["e1.w3"]]))
    back = to_hf([up, down], ours)
    assert back.keys() == w.keys() and all(torch.equal(back[k], w[k]) for k in w)
    with pytest.raises(ValueError, match="do not split into 2 groups"):
        Rule(target="up", sources=("a", "b", "c"), stack=2)
