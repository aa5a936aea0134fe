"""Gemma 3 (Gemma3ForCausalLM, gemma3_text): parity with transformers for the 5:1 pattern and others, with a local
RoPE base apart from the global one and linear scaling on the global layers; config.json as transformers 5 and
4.50 write it; gemma-3-1b's released config, counted and equal to its example spec; refusals at their key; and
what only a Gemma 3 export holds: (1 + w) q/k norms and a RoPE base per kind of layer."""

from __future__ import annotations

import json

import attrs
import pytest
import torch

import blockspec
from blockspec.assembly.counting import count_parameters
from blockspec.interop import import_hf
from blockspec.interop.families import family_for, family_named
from blockspec.interop.hf_config import spec_dict

from .hf_parity import (assert_close, check_family, check_import, check_swaps_are_caught, ids_for, logits, perturbed,
                        refused, structured, transformers)

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

LENGTH = 24  # longer than every sliding window below
SMALL = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_attention_heads=4, head_dim=8,
             max_position_embeddings=64, bos_token_id=0, eos_token_id=0, pad_token_id=0)
CASES = {  # id -> config: every feature, the 5:1 pattern, a local base apart, linear scaling, tying, biases
    "5to1-gqa-local_base-v5": dict(num_hidden_layers=7, num_key_value_heads=2, sliding_window=5,
                                   rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 5e5},
                                                    "sliding_attention": {"rope_type": "default", "rope_theta": 50.0}}),
    "pattern3-mqa-linear8-untied-capped": dict(num_hidden_layers=6, num_key_value_heads=1, sliding_window=6,
                                               sliding_window_pattern=3, tie_word_embeddings=False,
                                               rope_parameters={"full_attention": {"rope_type": "linear",
                                                                                   "factor": 8.0, "rope_theta": 1e4},
                                                                "sliding_attention": {"rope_type": "default",
                                                                                      "rope_theta": 20.0}},
                                               final_logit_softcapping=3.0, query_pre_attn_scalar=12),
    "layer_types-mostly_global-bias-exact_gelu-head_dim16": dict(
        num_hidden_layers=4, num_key_value_heads=4, head_dim=16, sliding_window=7, attention_bias=True,
        layer_types=["full_attention", "sliding_attention", "full_attention", "full_attention"],
        hidden_activation="gelu", rms_norm_eps=1e-5),
}
LAYERS = {  # the [[layers]] each case imports as
    "5to1-gqa-local_base-v5": [{"every": 6, "offset": 5, "positional": {"base": 5e5},
                                "attention": {"use": "causal", "query_scale": 256**-0.5, "qk_norm": "head",
                                              "qk_norm_eps": 1e-6, "qk_norm_offset": True}}],
    "pattern3-mqa-linear8-untied-capped": [{"every": 3, "offset": 2,
                                            "positional": {"base": 1e4, "scaling": "linear", "factor": 8.0},
                                            "attention": {"use": "causal", "query_scale": 12**-0.5,
                                                          "qk_norm": "head", "qk_norm_eps": 1e-6,
                                                          "qk_norm_offset": True}}],
    "layer_types-mostly_global-bias-exact_gelu-head_dim16": [{"every": 3, "offset": 1,  # [1] of [0, 4)
                                                              "attention": {"sliding_window": 7},
                                                              "positional": {"base": 1e4}}],
}

# google/gemma-3-1b-pt's config.json, as released
GEMMA3_1B = {
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
    "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
    "initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768,
    "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
    "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
    "rope_scaling": None, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": True, "vocab_size": 262144,
}
GEMMA3_1B_COUNT = 999_885_952


def tiny(seed: int = 0, **config):
    """A random Gemma3ForCausalLM (its config class is Gemma3TextConfig) with eager attention, every parameter
    perturbed."""
    hf_config = transformers.Gemma3TextConfig(**config)
    hf_config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return perturbed(transformers.Gemma3ForCausalLM(hf_config), seed)


def hf_count(config: dict) -> int:
    """transformers' own count of Gemma3ForCausalLM for ``config``, on the meta device (a tied head once)."""
    hf_config = transformers.Gemma3TextConfig.from_dict(config)
    with torch.device("meta"):
        model = transformers.Gemma3ForCausalLM(hf_config)
    return sum(p.numel() for p in model.parameters())


def counted(config: dict, registry) -> tuple[blockspec.ModelSpec, int]:
    """The spec ``config`` imports as, and its count, checked equal to transformers' own."""
    spec = structured(config, registry)
    count = count_parameters(spec, registry).exact
    assert count == hf_count(config)
    return spec, count


def config_json(**change) -> dict:
    """A small Gemma 3 config.json, ``change`` applied."""
    return {"architectures": ["Gemma3ForCausalLM"], **SMALL, "num_hidden_layers": 7, "sliding_window": 5, **change}


@pytest.mark.parametrize("case", CASES)
def test_parity_import_checkpoint_export(case, tmp_path, registry):
    hf_model = tiny(**SMALL | CASES[case])
    imported = check_family(hf_model, tmp_path, registry, length=LENGTH)
    assert count_parameters(imported.spec, registry).exact == sum(p.numel() for p in hf_model.parameters())
    for written in ("hf", "export"):  # transformers' config.json and blockspec's export read as the same layers
        document = spec_dict(json.loads((tmp_path / written / "config.json").read_text()), file="c", name="m")
        assert document["layers"] == LAYERS[case], written
    if case.startswith("5to1"):
        check_swaps_are_caught(imported, hf_model, LENGTH)


def test_a_config_as_transformers_4_50_wrote_it_imports_the_same_model(tmp_path, registry):
    """rope_theta, rope_local_base_freq and rope_scaling at the top level, sliding_window_pattern, no layer_types."""
    hf_model = tiny(**SMALL | CASES["pattern3-mqa-linear8-untied-capped"])
    hf_model.save_pretrained(tmp_path)
    file = tmp_path / "config.json"
    config = {k: v for k, v in json.loads(file.read_text()).items()
              if k not in ("rope_parameters", "layer_types", "_sliding_window_pattern")}
    file.write_text(json.dumps({**config, "rope_theta": 1e4, "rope_local_base_freq": 20.0, "sliding_window_pattern": 3,
                                "rope_scaling": {"rope_type": "linear", "factor": 8.0}}))
    imported = check_import(hf_model, tmp_path, registry, length=LENGTH, what="transformers 4.50's config")
    assert [imported.spec.layer(i).positional.config.base for i in range(6)] == [20.0, 20.0, 1e4] * 2


def test_dropping_the_qk_norm_offset_breaks_parity(tmp_path, registry):
    """The q/k norm weights read as w rather than 1 + w: the bound must see it."""
    hf_model = tiny(**SMALL | CASES["5to1-gqa-local_base-v5"])
    hf_model.save_pretrained(tmp_path)
    imported = import_hf(tmp_path, registry=registry)
    spec = imported.spec
    plain = attrs.evolve(spec, attention=attrs.evolve(spec.attention, config=attrs.evolve(
        spec.attention.config, qk_norm_offset=False)), layers=())
    rebuilt = blockspec.build(plain, registry=registry).eval()
    rebuilt.load_state_dict(imported.state_dict())
    ids = ids_for(hf_model, LENGTH)
    expected = logits(hf_model, ids)
    assert_close(logits(imported, ids), expected, "with the offset")
    assert (logits(rebuilt, ids) - expected).abs().max().item() > 1e-4 * max(1.0, expected.abs().max().item())


@pytest.mark.parametrize("config", [GEMMA3_1B, transformers.Gemma3TextConfig().to_dict()],
                         ids=["gemma-3-1b", "transformers-default"])
def test_released_and_default_configs_import_with_transformers_parameter_count(config, registry):
    spec, _ = counted(config, registry)
    windows = [spec.layer(i).attention.config.sliding_window for i in range(spec.model.n_layers)]
    assert [i for i, w in enumerate(windows) if w is None] == [5, 11, 17, 23]
    assert {spec.layer(i).positional.config.base for i in (5, 11)} == {1e6}
    assert {spec.layer(i).positional.config.base for i in (0, 4, 25)} == {1e4}


def test_gemma3_1b_counts_as_released_and_is_the_example_spec(registry, example_spec):
    spec, example = structured(GEMMA3_1B, registry), example_spec("gemma-3-1b")
    assert count_parameters(spec, registry).exact == count_parameters(example, registry).exact == GEMMA3_1B_COUNT
    assert attrs.evolve(spec, model=attrs.evolve(spec.model, name=example.model.name)) == example


def test_the_example_spec_exports_as_gemma3_and_reads_back_the_same(registry, example_spec):
    example = example_spec("gemma-3-1b")
    family = family_for(example)
    assert family is family_named("gemma3_text")
    written = family.config_json(example)
    assert hf_count(written) == GEMMA3_1B_COUNT
    assert written["rope_parameters"]["sliding_attention"]["rope_theta"] == written["rope_local_base_freq"] == 1e4
    assert written["sliding_window_pattern"] == 6 and written["attn_logit_softcapping"] is None
    back = structured(written, registry)
    assert attrs.evolve(back, model=attrs.evolve(back.model, name=example.model.name)) == example


def test_absent_keys_take_gemma3s_defaults(registry):
    """No rope keys: 1e6 on the global layers, 1e4 on the sliding ones; no layer_types or pattern: 5:1; no
    softcaps; a tied head; 4 kv heads, head_dim 256 and query_pre_attn_scalar 256."""
    config = {key: value for key, value in config_json().items() if key not in ("head_dim", "sliding_window")}
    spec = structured({**config, "num_hidden_layers": 12}, registry)
    assert [spec.layer(i).positional.config.base for i in range(6)] == [1e4] * 5 + [1e6]
    assert [spec.layer(i).attention.config.sliding_window for i in range(12)] == ([4096] * 5 + [None]) * 2
    assert (spec.model.kv_heads, spec.model.head_dim, spec.head.config.tied) == (4, 256, True)
    assert spec.attention.config.logit_softcap is None and spec.head.config.logit_softcap is None


@pytest.mark.parametrize(("change", "path", "words"), [
    ({"attn_logit_softcapping": 50.0}, "$.attn_logit_softcapping", "never caps"),
    ({"rope_parameters": {"sliding_attention": {"rope_type": "linear", "factor": 2.0}}},
     "$.rope_parameters.sliding_attention.rope_type", "on the sliding layers is not supported"),
    ({"rope_parameters": {"rope_theta": 5.0}}, "$.rope_parameters.rope_theta", "not a layer type"),
    ({"rope_parameters": {"full_attention": {"rope_type": "longrope", "factor": 2.0}}},
     "$.rope_parameters.full_attention.rope_type", "'longrope'"),
    ({"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 5.0}}, "rope_theta": 6.0},
     "$.rope_theta", "differs from rope_parameters.rope_theta"),
    ({"rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 5.0}},
      "rope_local_base_freq": 6.0}, "$.rope_local_base_freq", "differs"),
    ({"partial_rotary_factor": 0.5}, "$.partial_rotary_factor", "partial RoPE"),
    ({"layer_types": ["full_attention"]}, "$.layer_types", "expected 7 entries"),
    ({"sliding_window_pattern": 0}, "$.sliding_window_pattern", "expected a positive integer"),
    ({"sliding_window_pattern": 2, "layer_types": ["sliding_attention"] * 7}, "$.sliding_window_pattern",
     "make them agree"),
    ({"sliding_window": None}, "$.sliding_window", "null, but layers are 'sliding_attention'"),
    ({"hidden_activation": "silu"}, "$.hidden_activation", "unsupported activation 'silu'"),
    ({"query_pre_attn_scalar": 0}, "$.query_pre_attn_scalar", "expected a number > 0"),
    ({"use_bidirectional_attention": True}, "$.use_bidirectional_attention", "bidirectional"),
    ({"sliding_window_size": 5}, "$.sliding_window_size", "unknown Gemma 3 config key"),
])
def test_refusals_name_the_key(change, path, words):
    message = refused(config_json(**change))
    assert len(message.splitlines()) == 1 and f"config.json: {path}: " in message and words in message


def test_transformers_5s_own_keys_are_read_or_accepted(registry):
    """A config.json transformers 5 wrote (``_sliding_window_pattern`` and all) imports."""
    structured(transformers.Gemma3TextConfig(**SMALL | CASES["5to1-gqa-local_base-v5"]).to_dict(), registry)


def evolved_attention(spec: blockspec.ModelSpec, **change) -> blockspec.ModelSpec:
    return attrs.evolve(spec, attention=attrs.evolve(spec.attention, config=attrs.evolve(spec.attention.config,
                                                                                         **change)))


def document(**change) -> dict:
    """The spec dict a small config.json imports as (layer 5 global, the rest sliding)."""
    return spec_dict(config_json(**change), file="config.json", name="m")


QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 50,
         "max_position_embeddings": 64}


def test_other_families_refuse_the_qk_norm_offset_and_a_rope_base_per_layer(registry):
    gemma3 = blockspec.structure_spec(document(), registry)
    assert family_named("gemma3_text").misfits(gemma3) == []
    assert any("[[layers]]: layer 5 differs" in p for p in family_named("gemma2").misfits(gemma3))
    qwen3 = spec_dict(QWEN3, file="config.json", name="m")
    assert family_named("qwen3").misfits(blockspec.structure_spec(qwen3, registry)) == []
    offset = blockspec.structure_spec({**qwen3, "attention": {**qwen3["attention"], "qk_norm_offset": True}},
                                      registry)
    assert family_named("qwen3").misfits(offset) == ["[attention] qk_norm_offset = true: the family's q/k norms "
                                                     "scale by w"]
    based = blockspec.structure_spec({**qwen3, "layers": [{"index": [1], "positional": {"base": 5.0}}]}, registry)
    assert any("[[layers]]: layer 1 differs" in p for p in family_named("qwen3").misfits(based))


@pytest.mark.parametrize(("change", "words"), [
    (lambda s: evolved_attention(s, qk_norm_offset=False), "qk_norm_offset = false: the family's q/k norms scale by "
     "1 + w"),
    (lambda s: evolved_attention(s, logit_softcap=50.0), "[attention] logit_softcap = 50.0"),
    (lambda s: attrs.evolve(s, positional=attrs.evolve(s.positional, config=attrs.evolve(
        s.positional.config, scaling="linear", factor=2.0))), "on the sliding layers"),
])
def test_export_misfits_say_what_gemma3_lacks(change, words, registry):
    spec = change(structured(config_json(), registry))
    assert any(words in problem for problem in family_named("gemma3_text").misfits(spec))


@pytest.mark.parametrize(("rule", "words"), [
    ({"index": [0], "positional": {"base": 7.0}}, "the sliding layers rotate with 2 different RoPE tables"),
    ({"index": [1], "positional": {"fraction": 0.5}}, "the sliding layers rotate with 2 different RoPE tables"),
    ({"from": 0, "positional": {"fraction": 0.5}}, "fraction = 0.5 on the sliding layers"),
    ({"index": [2], "norm": {"eps": 1e-3}}, "[[layers]]: layer 2 differs from the model-wide tables beyond its "
     "attention's sliding_window and its RoPE table"),
])
def test_layers_beyond_one_rope_per_kind_are_refused(rule, words, registry):
    found = document()
    spec = blockspec.structure_spec({**found, "layers": [*found["layers"], rule]}, registry)
    assert any(words in problem for problem in family_named("gemma3_text").misfits(spec))
