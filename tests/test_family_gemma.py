"""Gemma, Gemma 2 and OLMo 2: parity with transformers, released and default configs, exact parameter
counts, refusals at their key, and a parity bound sharp enough to catch a dropped (1 + w) norm offset."""

from __future__ import annotations

import pytest
import torch
from attrs import evolve

from .hf_parity import (as_older_transformers, assert_close, bound, check_family, check_import, check_swaps_are_caught,
                        counted, ids_for, logits, refused, structured, tiny, transformers)

from blockspec.assembly.assemble import build  # noqa: E402
from blockspec.assembly.counting import count_parameters  # noqa: E402
from blockspec.interop import import_hf  # noqa: E402
from blockspec.interop.families import family_for, family_named  # noqa: E402
from blockspec.modules.taps import recording  # noqa: E402

LENGTH = 24  # longer than every sliding window below
SMALL = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             bos_token_id=0, eos_token_id=0, pad_token_id=0)
CASES = {  # id -> (transformers class prefix, config)
    "gemma-mqa-tied-head_dim16-legacy_gelu": ("Gemma", dict(num_key_value_heads=1, head_dim=16, hidden_act="gelu")),
    "gemma-gqa-untied-bias-theta": ("Gemma", dict(num_key_value_heads=2, head_dim=8, tie_word_embeddings=False,
                                                  attention_bias=True, rms_norm_eps=1e-5,
                                                  rope_parameters={"rope_type": "default", "rope_theta": 5e5})),
    "gemma2-alternating-capped-scalar12": ("Gemma2", dict(num_hidden_layers=3, num_key_value_heads=2, head_dim=8,
                                                          sliding_window=6, attn_logit_softcapping=5.0,
                                                          final_logit_softcapping=3.0, query_pre_attn_scalar=12)),
    "gemma2-layer_types-uncapped-untied-bias-exact_gelu": ("Gemma2", dict(
        num_hidden_layers=4, num_key_value_heads=4, head_dim=8, sliding_window=5, tie_word_embeddings=False,
        layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
        attn_logit_softcapping=None, final_logit_softcapping=None, attention_bias=True, hidden_activation="gelu",
        query_pre_attn_scalar=8)),
    "olmo2-mha-untied": ("Olmo2", dict(num_key_value_heads=4, rms_norm_eps=1e-6)),
    "olmo2-gqa-tied-bias-head_dim16": ("Olmo2", dict(num_key_value_heads=2, tie_word_embeddings=True,
                                                     attention_bias=True, head_dim=16,
                                                     rope_parameters={"rope_type": "default", "rope_theta": 5e5})),
}
SWAPPED = {"gemma-mqa-tied-head_dim16-legacy_gelu", "gemma2-alternating-capped-scalar12",
           "olmo2-gqa-tied-bias-head_dim16"}

# Released config.json files, as published (google/gemma-2b, google/gemma-2-2b, allenai/OLMo-2-0425-1B).
GEMMA_2B = {
    "architectures": ["GemmaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 2,
    "eos_token_id": 1, "head_dim": 256, "hidden_act": "gelu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 16384, "max_position_embeddings": 8192, "model_type": "gemma", "num_attention_heads": 8,
    "num_hidden_layers": 18, "num_key_value_heads": 1, "pad_token_id": 0, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 10000.0, "torch_dtype": "bfloat16", "transformers_version": "4.38.0.dev0",
    "use_cache": True, "vocab_size": 256000,
}
GEMMA2_2B = {
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
    "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "initializer_range": 0.02,
    "intermediate_size": 9216, "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 8,
    "num_hidden_layers": 26, "num_key_value_heads": 4, "pad_token_id": 0, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "torch_dtype": "float32",
    "transformers_version": "4.42.4", "use_cache": True, "vocab_size": 256000,
}
OLMO2_1B = {
    "architectures": ["Olmo2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": None,
    "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "olmo2", "num_attention_heads": 16,
    "num_hidden_layers": 16, "num_key_value_heads": 16, "pad_token_id": 100277, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 500000, "tie_word_embeddings": False, "torch_dtype": "float32",
    "transformers_version": "4.48.3", "use_cache": True, "vocab_size": 100352,
}
RELEASED = {  # id -> (config, transformers class prefix, parameters as transformers counts them, example spec)
    "gemma-2b": (GEMMA_2B, "Gemma", 2_506_172_416, None),
    "gemma-2-2b": (GEMMA2_2B, "Gemma2", 2_614_341_888, "gemma-2-2b"),
    "olmo-2-1b": (OLMO2_1B, "Olmo2", 1_484_916_736, "olmo-2-1b"),
}


@pytest.mark.parametrize("case", CASES)
def test_parity_round_trip_and_parameter_count(case, tmp_path, registry):
    prefix, config = CASES[case]
    hf_model = tiny(prefix, **{**SMALL, **config})
    imported = check_family(hf_model, tmp_path, registry, length=LENGTH)
    assert count_parameters(imported.spec, registry).exact == sum(p.numel() for p in hf_model.parameters())
    if case in SWAPPED:
        check_swaps_are_caught(imported, hf_model, LENGTH)


def test_dropping_the_gemma_norm_offset_breaks_parity(tmp_path, registry):
    """The same weights read as w rather than 1 + w: the bound must see it, or it would not see a missed offset."""
    hf_model = tiny("Gemma", **{**SMALL, **CASES["gemma-mqa-tied-head_dim16-legacy_gelu"][1]})
    hf_model.save_pretrained(tmp_path)
    imported = import_hf(tmp_path, registry=registry)
    spec = imported.spec
    plain = evolve(spec, norm=evolve(spec.norm, config=evolve(spec.norm.config, offset=False)))
    rebuilt = build(plain, registry=registry)
    rebuilt.load_state_dict(imported.state_dict())
    ids = ids_for(hf_model, LENGTH)
    expected = logits(hf_model, ids)
    assert_close(logits(imported, ids), expected, "with the offset")
    assert (logits(rebuilt, ids) - expected).abs().max().item() > bound(expected)


def test_gemma_embedding_scale_is_rounded_to_the_dtype_as_transformers_rounds_it(tmp_path, registry):
    """sqrt(32) = 5.657 is 5.656 in bfloat16: both sides multiply bfloat16 embeddings by the rounded scale."""
    hf_model = tiny("Gemma", **{**SMALL, **CASES["gemma-mqa-tied-head_dim16-legacy_gelu"][1]})
    hf_model.save_pretrained(tmp_path)
    imported = import_hf(tmp_path, registry=registry, dtype=torch.bfloat16).eval()
    ids, seen = ids_for(hf_model, 8), {}
    with recording(lambda module, name, tensor: seen.setdefault(name, tensor)), torch.no_grad():
        imported(ids)
    with torch.no_grad():
        expected = hf_model.to(torch.bfloat16).model.embed_tokens(ids)  # (B, N, d)
    assert torch.equal(seen["embedding.scaled"], expected)


def test_gemma2_configs_without_layer_types_alternate_from_a_sliding_layer_0(tmp_path, registry):
    """Configs written before ``layer_types`` (and the released keys transformers never reads) import alike."""
    hf_model = tiny("Gemma2", **{**SMALL, **CASES["gemma2-alternating-capped-scalar12"][1]})
    hf_model.save_pretrained(tmp_path)
    as_older_transformers(tmp_path, "layer_types", hidden_act="gelu_pytorch_tanh", cache_implementation="hybrid",
                          sliding_window_size=6)
    imported = check_import(hf_model, tmp_path, registry, length=LENGTH, what="old-style config")
    assert [imported.spec.layer(i).attention.config.sliding_window for i in range(3)] == [6, None, 6]


@pytest.mark.parametrize("name", RELEASED)
def test_released_configs_import_with_transformers_parameter_count(name, registry, example_spec):
    config, prefix, count, example = RELEASED[name]
    spec, found = counted(prefix, config, registry)
    assert found == count
    if example is not None:  # the example spec of the same model is the one the import derives
        expected = example_spec(example)
        assert spec.model.kv_heads == expected.model.kv_heads  # n_kv_heads = n_heads or left out: the same
        model = evolve(spec.model, name=expected.model.name, n_kv_heads=expected.model.n_kv_heads)
        assert evolve(spec, model=model) == expected


@pytest.mark.parametrize("prefix", ["Gemma", "Gemma2", "Olmo2"])
def test_default_transformers_configs_import(prefix, registry):
    config = getattr(transformers, f"{prefix}Config")().to_dict()
    counted(prefix, config, registry)


GEMMA = {"architectures": ["GemmaForCausalLM"], "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 8, "vocab_size": 50,
         "max_position_embeddings": 64}
GEMMA2 = {**GEMMA, "architectures": ["Gemma2ForCausalLM"], "sliding_window": 16}
OLMO2 = {**GEMMA, "architectures": ["Olmo2ForCausalLM"]}


@pytest.mark.parametrize(("config", "change", "path", "words"), [
    (GEMMA, {"hidden_act": "relu"}, "$.hidden_act", "unsupported activation 'relu'"),
    (GEMMA, {"hidden_activation": "gelu"}, "$.hidden_activation", "transformers before 5.0"),
    (GEMMA, {"use_bidirectional_attention": True}, "$.use_bidirectional_attention", "bidirectional"),
    (GEMMA, {"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}, "$.rope_scaling.rope_type", "'longrope'"),
    (GEMMA, {"partial_rotary_factor": 0.5}, "$.partial_rotary_factor", "partial RoPE"),
    (GEMMA, {"query_pre_attn_scalar": 16}, "$.query_pre_attn_scalar", "unknown Gemma config key"),
    (GEMMA2, {"layer_types": ["full_attention"]}, "$.layer_types", "expected 2 entries"),
    (GEMMA2, {"sliding_window": None}, "$.sliding_window", "null, but layer_types"),
    (GEMMA2, {"hidden_activation": "silu"}, "$.hidden_activation", "unsupported activation 'silu'"),
    (GEMMA2, {"query_pre_attn_scalar": 0}, "$.query_pre_attn_scalar", "expected a number > 0"),
    (OLMO2, {"hidden_act": "gelu"}, "$.hidden_act", "unsupported activation 'gelu'"),
    (OLMO2, {"clip_qkv": 8.0}, "$.clip_qkv", "unknown OLMo 2 config key"),
])
def test_refusals_name_the_key(config, change, path, words):
    message = refused({**config, **change})
    assert len(message.splitlines()) == 1 and f"config.json: {path}: " in message and words in message


def test_gemma2_all_global_layers_export_with_a_window_transformers_needs(registry):
    spec = structured({**GEMMA2, "layer_types": ["full_attention"] * 2}, registry)
    assert spec.layers == () and spec.attention.config.sliding_window is None
    assert family_named("gemma2").config_json(spec)["sliding_window"] == 64


@pytest.mark.parametrize(("example", "family"), [("gemma-2-2b", "gemma2"), ("olmo-2-1b", "olmo2")])
def test_the_example_specs_export_as_their_family(example, family, example_spec):
    assert family_for(example_spec(example)) is family_named(family)


@pytest.mark.parametrize(("config", "change", "words"), [
    (GEMMA, lambda s: evolve(s, norm=evolve(s.norm, config=evolve(s.norm.config, offset=False))), "[norm] offset"),
    (GEMMA, lambda s: evolve(s, model=evolve(s.model, embedding_scale=None)), "embedding_scale"),
    (GEMMA2, lambda s: evolve(s, attention=evolve(s.attention, config=evolve(s.attention.config, query_scale=0.3))),
     "query_pre_attn_scalar"),
    (OLMO2, lambda s: evolve(s, attention=evolve(s.attention, config=evolve(s.attention.config, qk_norm="head"))),
     "qk_norm = 'head'"),
])
def test_export_misfits_say_what_the_family_lacks(config, change, words, registry):
    spec = change(structured(config, registry))
    family = family_named({"GemmaForCausalLM": "gemma", "Gemma2ForCausalLM": "gemma2"}.get(
        config["architectures"][0], "olmo2"))
    assert any(words in problem for problem in family.misfits(spec))
