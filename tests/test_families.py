"""Every Hugging Face family in FAMILIES keeps the Family contract; a new family gets these checks by
adding its smallest config.json to EXAMPLES."""

from __future__ import annotations

import re

import pytest

import blockspec
from blockspec.checkpoint.weights import build_on_meta, unique_state
from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.families import FAMILIES, family_for, family_named
from blockspec.interop.hf_config import family_of, spec_dict
from blockspec.interop.weight_map import hf_shapes

EXAMPLES = {  # family name -> a small config.json of it
    "gpt2": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4,
             "n_positions": 64, "vocab_size": 50, "tie_word_embeddings": False},
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
              "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 50, "max_position_embeddings": 64, "rope_theta": 5e5},
    "gemma": {"architectures": ["GemmaForCausalLM"], "model_type": "gemma", "hidden_size": 32, "intermediate_size": 48,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16,
              "vocab_size": 50, "max_position_embeddings": 64},
    "gemma2": {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 32,
               "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
               "head_dim": 8, "vocab_size": 50, "max_position_embeddings": 64, "sliding_window": 16,
               "query_pre_attn_scalar": 16},
    "olmo2": {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "hidden_size": 32, "intermediate_size": 48,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50,
              "max_position_embeddings": 64, "attention_bias": True},
    "mistral": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 32,
                "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "vocab_size": 50, "max_position_embeddings": 64, "sliding_window": 16},
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 32,
              "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 50, "max_position_embeddings": 64, "use_sliding_window": True, "sliding_window": 16,
              "max_window_layers": 1},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 32,
              "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 16, "vocab_size": 50, "max_position_embeddings": 64, "tie_word_embeddings": True},
    "starcoder2": {"architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2", "hidden_size": 32,
                   "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "vocab_size": 50, "max_position_embeddings": 64, "sliding_window": 16},
    "gpt_neox": {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_size": 32,
                 "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 50,
                 "max_position_embeddings": 64, "rotary_pct": 0.5, "rotary_emb_base": 10000},
    "phi": {"architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_size": 32, "intermediate_size": 48,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50,
            "max_position_embeddings": 64, "partial_rotary_factor": 0.5},
    "phi3": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 32, "intermediate_size": 48,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50,
             "max_position_embeddings": 64, "sliding_window": 16, "partial_rotary_factor": 0.5,
             "pad_token_id": 0},  # the default pad id 32000 lies outside this vocabulary
    "mixtral": {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 32,
                "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "vocab_size": 50, "max_position_embeddings": 64, "num_local_experts": 4, "num_experts_per_tok": 2},
    "olmo": {"architectures": ["OlmoForCausalLM"], "model_type": "olmo", "hidden_size": 32, "intermediate_size": 48,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50,
             "max_position_embeddings": 64, "attention_bias": True},
    "falcon": {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 32,
               "ffn_hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 50,
               "max_position_embeddings": 64, "bias": True},  # Falcon-7B's layer: one norm, multi-query
    "qwen3_moe": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 32,
                  "intermediate_size": 40, "moe_intermediate_size": 24, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 50,
                  "max_position_embeddings": 64, "num_experts": 4, "num_experts_per_tok": 2,
                  "norm_topk_prob": True},
    "smollm3": {"architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "hidden_size": 32,
                "intermediate_size": 48, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
                "vocab_size": 50, "max_position_embeddings": 64, "no_rope_layer_interval": 2,
                "use_sliding_window": True, "sliding_window": 16,  # layers 1 and 3: NoPE, and they slide
                "pad_token_id": 0},  # the default pad id 128004 lies outside this vocabulary
    "gemma3_text": {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 32,
                    "intermediate_size": 48, "num_hidden_layers": 7, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 50, "max_position_embeddings": 64,
                    "sliding_window": 16, "query_pre_attn_scalar": 16, "rope_local_base_freq": 100.0},  # layer 5 global
    "gpt_oss": {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 32,
                "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "head_dim": 8, "vocab_size": 50, "max_position_embeddings": 64, "num_local_experts": 4,
                "num_experts_per_tok": 2, "sliding_window": 16, "pad_token_id": 0},  # layer 0 slides
    "deepseek_v3": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 32,
                    "intermediate_size": 40, "moe_intermediate_size": 16, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 8, "num_experts_per_tok": 2,
                    "n_group": 4, "topk_group": 2, "kv_lora_rank": 12, "q_lora_rank": 6, "qk_rope_head_dim": 8,
                    "qk_nope_head_dim": 16, "v_head_dim": 10, "first_k_dense_replace": 1, "vocab_size": 50,
                    "max_position_embeddings": 64},  # layer 0 dense, layer 1 routed
}
NAMES = [family.name for family in FAMILIES]


def spec_of(family_name: str, registry) -> blockspec.ModelSpec:
    return blockspec.structure_spec(spec_dict(EXAMPLES[family_name], file="config.json", name="m"), registry)


def test_every_family_has_an_example_and_a_unique_name_and_architectures():
    assert sorted(EXAMPLES) == sorted(NAMES) and len(set(NAMES)) == len(NAMES)
    architectures = [arch for family in FAMILIES for arch in family.architectures]
    assert len(set(architectures)) == len(architectures)


@pytest.mark.parametrize("name", NAMES)
def test_each_architecture_and_model_type_finds_its_family(name):
    family = family_named(name)
    for arch, model_type in family.architectures.items():
        assert family_of({"architectures": [arch]}, "config.json") is family
        assert family_of({"model_type": model_type}, "config.json") is family


@pytest.mark.parametrize("name", NAMES)
def test_config_json_round_trips_through_spec_dict(name, registry):
    family, spec = family_named(name), spec_of(name, registry)
    assert family.misfits(spec) == [] and family_for(spec) is family
    reader = ConfigReader(family.config_json(spec), "exported")
    assert family.spec_dict(reader, "m") == spec_dict(EXAMPLES[name], file="config.json", name="m")
    assert reader.problems == []


@pytest.mark.parametrize("name", NAMES)
def test_rules_cover_the_model_with_canonical_names_and_layer_indices(name, registry):
    family, spec = family_named(name), spec_of(name, registry)
    state = unique_state(build_on_meta(spec, registry, "config.json"))
    rules = family.rules(spec)
    assert {rule.target for rule in rules} == set(state)
    for hf_name in hf_shapes(rules, state):
        assert family.normalize_name(hf_name) == hf_name and not family.ignored(hf_name, spec)
        layer = re.match(family.layer_index, hf_name)
        assert layer is None or int(layer.group(1)) < spec.model.n_layers
    per_layer = [n for n in hf_shapes(rules, state) if re.match(family.layer_index, n)]
    assert len(per_layer) >= 2 * spec.model.n_layers
