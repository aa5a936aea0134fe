"""config.json -> spec: old and new key names, and a clear refusal for what blockspec would get wrong."""

from __future__ import annotations

import json

import pytest

import blockspec
from blockspec.errors import CheckpointError
from blockspec.interop import spec_from_hf
from blockspec.interop.hf_config import spec_dict

LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 100,
    "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "hidden_act": "silu",
}
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
        "n_positions": 128, "vocab_size": 100}


def structured(config, registry):
    return blockspec.structure_spec(spec_dict(config, file="config.json", name="m"), registry)


def refused(config) -> str:
    with pytest.raises(CheckpointError) as caught:
        spec_dict(config, file="config.json", name="m")
    return str(caught.value)


def test_llama_defaults_match_transformers(registry):
    spec = structured(LLAMA, registry)
    assert spec.model.kv_heads == 2 and spec.model.d_ff == 96 and spec.model.bias is False
    assert spec.positional.name == "rope" and spec.positional.config.layout == "half"
    assert spec.positional.config.base == 10000.0 and spec.head.config.tied is False
    assert spec.norm.name == "rmsnorm" and spec.activation.name == "swiglu"


@pytest.mark.parametrize("keys", [{"rope_theta": 5e5}, {"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}},
                                  {"rope_theta": 5e5, "rope_scaling": None}])
def test_rope_theta_old_and_new_style(registry, keys):
    assert structured({**LLAMA, **keys}, registry).positional.config.base == 5e5


def test_gpt2_defaults_and_old_keys(registry):
    spec = structured({**GPT2, "n_ctx": 64, "n_positions": None}, registry)
    assert spec.model.context_length == 64 and spec.model.d_ff == 256 and spec.head.config.tied
    assert spec.activation.name == "gelu" and spec.activation.config.approximate == "tanh"
    assert spec.norm.config.eps == 1e-5


def test_model_type_alone_identifies_the_architecture(registry):
    config = {k: v for k, v in GPT2.items() if k != "architectures"}
    assert structured(config, registry).positional.name == "learned"


@pytest.mark.parametrize(("change", "path", "words"), [
    ({"rope_scaling": {"rope_type": "longrope", "factor": 8.0}}, "$.rope_scaling.rope_type", "RoPE scaling 'longrope'"),
    ({"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4}}, "$.rope_parameters.rope_type",
     "'proportional'"),
    ({"sliding_window": 32}, "$.sliding_window", "sliding-window attention"),
    ({"hidden_act": "gelu"}, "$.hidden_act", "unsupported activation 'gelu'"),
    ({"partial_rotary_factor": 0.5}, "$.partial_rotary_factor", "partial RoPE"),
    ({"hidden_size": "64"}, "$.hidden_size", "expected int, found str"),
    ({"num_hidden_layers": None}, "$.num_hidden_layers", "missing required key"),
])
def test_llama_refusals_name_the_key(change, path, words):
    message = refused({**LLAMA, **change})
    assert f"config.json: {path}: " in message and words in message


def test_a_sliding_window_that_never_bites_is_accepted(registry):
    assert structured({**LLAMA, "sliding_window": 4096}, registry).model.context_length == 128


@pytest.mark.parametrize(("change", "path"), [
    ({"activation_function": "quick_gelu"}, "$.activation_function"),
    ({"scale_attn_by_inverse_layer_idx": True}, "$.scale_attn_by_inverse_layer_idx"),
    ({"add_cross_attention": True}, "$.add_cross_attention"),
    ({"tie_word_embeddings": "yes"}, "$.tie_word_embeddings"),
])
def test_gpt2_refusals_name_the_key(change, path):
    assert f"config.json: {path}: " in refused({**GPT2, **change})


def test_every_problem_is_reported_at_once():
    message = refused({**LLAMA, "hidden_act": "relu", "rope_scaling": {"type": "su", "factor": 2.0}})
    assert len(message.splitlines()) == 2


@pytest.mark.parametrize("architectures", [["BertModel"], ["BloomForCausalLM"], [], [{}], "GPT2LMHeadModel"])
def test_unsupported_architectures_list_what_is_supported(architectures):
    message = refused({**LLAMA, "architectures": architectures, "model_type": "other"})
    assert "$.architectures: unsupported architecture" in message and "LlamaForCausalLM" in message


@pytest.mark.parametrize("model_type", [["llama"], {"llama": 1}, 7])
def test_a_model_type_that_is_no_string_is_refused_not_crashed_on(model_type):
    config = {k: v for k, v in LLAMA.items() if k != "architectures"}
    assert "$.architectures: unsupported architecture" in refused({**config, "model_type": model_type})


def test_an_invalid_model_is_reported_against_config_json(tmp_path, registry):
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA, "num_attention_heads": 7}))
    with pytest.raises(CheckpointError, match=r"config.json: describes an invalid blockspec model:\n.*n_heads"):
        spec_from_hf(tmp_path, registry)
