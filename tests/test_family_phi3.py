"""Phi-3 (Phi3ForCausalLM): parity with transformers, config.json as released and as transformers 4 and
5 write it, parameter counts, and refusals at their keys (longrope's parity: tests/test_longrope.py)."""

from __future__ import annotations

import pytest

from blockspec.assembly.counting import count_parameters

from .hf_parity import (as_older_transformers, check_family, check_import, check_swaps_are_caught, counted, refused,
                        structured, tiny, transformers)

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=64, pad_token_id=None, eos_token_id=None)  # Phi-3's 32000 is out of vocab
CASES = {  # every feature: grouped kv heads, sliding window, partial rope, head_dim, tying
    "gqa-window7-untied-v61": dict(vocab_size=61, num_key_value_heads=2, sliding_window=7),
    "mha-tied-partial-head_dim16-v53": dict(vocab_size=53, tie_word_embeddings=True, partial_rotary_factor=0.5,
                                            head_dim=16, rope_parameters={"rope_type": "default",
                                                                          "rope_theta": 500.0}),
}
PHI_3_MINI_4K = {  # microsoft/Phi-3-mini-4k-instruct config.json, as released (transformers 4.40)
    "_name_or_path": "Phi-3-mini-4k-instruct", "architectures": ["Phi3ForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config",
                                           "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"},
    "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
    "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "phi3",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
    "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": True, "vocab_size": 32064,
}


@pytest.mark.parametrize("case", CASES)
def test_parity_import_checkpoint_export(case, tmp_path, registry):
    hf_model = tiny("Phi3", **SMALL, **CASES[case])
    imported = check_family(hf_model, tmp_path, registry, length=24)
    if case.startswith("gqa"):
        assert imported.spec.attention.config.sliding_window == 7
        check_swaps_are_caught(imported, hf_model, length=24)


def test_transformers_4_config_imports_the_same_model(tmp_path, registry):
    """rope_theta and partial_rotary_factor at the top level, rope_scaling null, no rope_parameters."""
    hf_model = tiny("Phi3", **SMALL, vocab_size=61, sliding_window=5, partial_rotary_factor=0.5,
                    rope_parameters={"rope_type": "default", "rope_theta": 2000.0})
    hf_model.save_pretrained(tmp_path)
    as_older_transformers(tmp_path, partial_rotary_factor=0.5, rope_scaling=None, torch_dtype="float32")
    imported = check_import(hf_model, tmp_path, registry, length=24, what="transformers 4 layout")
    assert (imported.spec.positional.config.base, imported.spec.positional.config.fraction) == (2000.0, 0.5)


@pytest.mark.parametrize("config", [PHI_3_MINI_4K, transformers.Phi3Config().to_dict()],
                         ids=["phi-3-mini-4k", "transformers-default"])
def test_released_and_default_configs_import_with_transformers_parameter_count(config, registry):
    counted("Phi3", config, registry)


def test_phi_3_mini_4k_is_a_3_8b_model_with_a_2047_token_window(registry):
    spec = structured(PHI_3_MINI_4K, registry)
    assert count_parameters(spec, registry).exact == 3_821_079_552
    assert spec.attention.config.sliding_window == 2047


def test_a_phi_3_5_mini_shaped_config_imports_longrope_and_counts_exactly(registry):
    """Phi-3.5-mini's shape (Phi-3-mini's sizes, 128k positions, original 4096, "longrope" with one factor per
    rotated pair of its 96-wide heads); its released factor values do not change the count, so these are made up."""
    config = {**PHI_3_MINI_4K, "max_position_embeddings": 131072, "sliding_window": 262144,
              "rope_scaling": {"type": "longrope", "short_factor": [1.0 + i / 48 for i in range(48)],
                               "long_factor": [1.5 + i for i in range(48)]}}
    spec = structured(config, registry)
    rope = spec.positional.config
    assert (rope.scaling, rope.original_context_length, len(rope.short_factor)) == ("longrope", 4096, 48)
    assert rope.attention_factor is None  # derived from 131072 / 4096 by the rope, as transformers does
    assert count_parameters(spec, registry).exact == 3_821_079_552
    counted("Phi3", config, registry)


def test_small_config_counts_as_transformers_does(registry):
    config = {"architectures": ["Phi3ForCausalLM"], **SMALL, **CASES["mha-tied-partial-head_dim16-v53"]}
    counted("Phi3", config, registry)


LONGROPE = {"type": "su", "short_factor": [1.0] * 48, "long_factor": [1.0] * 48}


@pytest.mark.parametrize(("change", "key", "says"), [
    ({"rope_scaling": {**LONGROPE, "long_factor": [1.0] * 4}}, "$.rope_scaling.short_factor", "48 factors, expected 4"),
    ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0] * 4,
                          "long_factor": [1.0] * 3}}, "$.rope_parameters.long_factor", "3 factors, expected 4"),
    ({"rope_scaling": {**LONGROPE, "short_factor": [1.0] * 4, "long_factor": [1.0] * 4,
                       "original_max_position_embeddings": 1}}, "$.rope_scaling.original_max_position_embeddings",
     "Phi3Config replaces it with its top-level original_max_position_embeddings"),
    ({"original_max_position_embeddings": 1, "rope_scaling": {**LONGROPE, "short_factor": [1.0] * 4,
                                                               "long_factor": [1.0] * 4}},
     "$.original_max_position_embeddings", "expected an integer >= 2"),
    ({"rope_scaling": {**LONGROPE, "short_factor": [1.0] * 4, "long_factor": "x"}}, "$.rope_scaling.long_factor",
     "expected list"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0}}, "$.rope_parameters.rope_type", "not one Phi-3"),
    ({"hidden_act": "gelu"}, "$.hidden_act", "unsupported activation"),
    ({"partial_rotary_factor": 0.375}, "$.partial_rotary_factor", "rotates 3 features"),
    ({"rope_scaling_type": "su"}, "$.rope_scaling_type", "unknown Phi-3 config key"),
])
def test_keys_it_cannot_express_are_refused_at_the_key(change, key, says):
    message = refused({"architectures": ["Phi3ForCausalLM"], **SMALL, "vocab_size": 50, **change})
    assert len(message.splitlines()) == 1 and f"config.json: {key}: " in message and says in message
