"""OLMo (OlmoForCausalLM, OLMo 1): parity with transformers (LayerNorms without weight or bias, attention biases,
tying), the released OLMo-1B config and transformers' default counted as transformers counts them, refusals."""

from __future__ import annotations

import pytest

import blockspec
from blockspec.errors import CheckpointError
from blockspec.interop.families import family_for
from blockspec.interop.hf_config import spec_dict

from .hf_parity import check_family, check_swaps_are_caught, counted, refused, tiny, transformers

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=64)
CASES = {  # grouped kv heads, attention bias, tying, rope base, head_dim
    "gqa-bias-v61": dict(vocab_size=61, num_key_value_heads=2, attention_bias=True, pad_token_id=0),
    "mha-tied-head_dim16-v53": dict(vocab_size=53, tie_word_embeddings=True, head_dim=16, pad_token_id=0,
                                    rope_parameters={"rope_type": "default", "rope_theta": 5e4}),
}
OLMO_1B = {  # allenai/OLMo-1B-hf config.json, as released (transformers 4.40)
    "architectures": ["OlmoForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": None,
    "clip_qkv": None, "eos_token_id": 50279, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 2048, "model_type": "olmo", "num_attention_heads": 16,
    "num_hidden_layers": 16, "num_key_value_heads": 16, "pad_token_id": 1, "rope_scaling": None,
    "rope_theta": 10000.0, "tie_word_embeddings": True, "torch_dtype": "float32",
    "transformers_version": "4.40.0.dev0", "use_cache": True, "vocab_size": 50304,
}


@pytest.mark.parametrize("case", CASES)
def test_parity_import_checkpoint_export(case, tmp_path, registry):
    hf_model = tiny("Olmo", **SMALL, **CASES[case])
    imported = check_family(hf_model, tmp_path, registry, length=24)
    norm = imported.spec.norm
    assert (norm.name, norm.config.elementwise_affine, norm.config.eps) == ("layernorm", False, 1e-5)
    if case.startswith("gqa"):
        check_swaps_are_caught(imported, hf_model, length=24)


@pytest.mark.parametrize("config", [OLMO_1B, transformers.OlmoConfig().to_dict()],
                         ids=["olmo-1b", "transformers-default"])
def test_released_and_default_configs_import_with_transformers_parameter_count(config, registry):
    counted("Olmo", config, registry)


def test_olmo_1b_counts_as_transformers_does(registry):
    assert counted("Olmo", OLMO_1B, registry)[1] == 1_176_764_416


@pytest.mark.parametrize(("change", "key"), [
    ({"clip_qkv": 8.0}, "$.clip_qkv"),  # OLMo-7B-0424's clamp: blockspec's attention does not clamp
    ({"rms_norm_eps": 1e-6}, "$.rms_norm_eps"),  # not an OlmoConfig key: its eps is fixed
    ({"partial_rotary_factor": 0.5}, "$.partial_rotary_factor"),
    ({"hidden_act": "gelu"}, "$.hidden_act"),
])
def test_keys_it_cannot_express_are_refused_at_the_key(change, key):
    message = refused({"architectures": ["OlmoForCausalLM"], **SMALL, "vocab_size": 50, **change})
    assert len(message.splitlines()) == 1 and f"config.json: {key}: " in message


@pytest.mark.parametrize(("norm", "words"), [
    ({"eps": 1e-6}, r"as OLMo: .*\[norm\] eps = 1e-06: OLMo's LayerNorms use eps 1e-05"),
    ({"elementwise_affine": True, "bias": True}, r"as OLMo: .*\[norm\] elementwise_affine = true"),
])
def test_export_refuses_norms_olmo_does_not_have(norm, words, registry):
    document = spec_dict({"architectures": ["OlmoForCausalLM"], **SMALL, "vocab_size": 50}, file="c", name="m")
    document["norm"] = {**document["norm"], **norm}
    with pytest.raises(CheckpointError, match=words):
        family_for(blockspec.structure_spec(document, registry))
