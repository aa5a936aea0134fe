"""The Llama-like families beyond Llama: Mistral, Qwen2, Qwen3 and StarCoder2, against ``transformers``.

Parity through ``tests/hf_parity.py`` (import, checkpoint, export, ``from_pretrained``, cached decoding) on
tiny models covering each family's options, with sequences longer than every sliding window; the default
and a released config of each import without problems and count what transformers counts; each key a
family cannot express is refused at that key.
"""

from __future__ import annotations

import json

import pytest

from blockspec.interop import import_hf
from blockspec.interop.hf_config import spec_dict
from blockspec.modules.attention import CausalSelfAttention

from .hf_parity import (as_older_transformers, bound, check_family, check_import, check_swaps_are_caught, counted,
                        ids_for, logits, refused, structured, tiny, transformers)

import blockspec  # noqa: E402  (after hf_parity: it skips the module without transformers)

LENGTH = 20  # longer than every window below
SMALL = dict(hidden_size=32, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=61, max_position_embeddings=64)
CASES = {  # family -> case -> config, every option the family has at least once
    "Mistral": {
        "window-gqa-untied": dict(sliding_window=5),
        "full-head_dim-mqa-tied": dict(sliding_window=None, head_dim=16, num_key_value_heads=1,
                                       tie_word_embeddings=True, rope_parameters={"rope_type": "default",
                                                                                  "rope_theta": 5e5}),
    },
    "Qwen2": {
        "top-layers-slide-untied": dict(use_sliding_window=True, sliding_window=5, max_window_layers=1),
        "full-tied-mha-head_dim": dict(tie_word_embeddings=True, num_key_value_heads=4, head_dim=16),
    },
    "Qwen3": {
        "head_dim-bias-top-layer-slides": dict(head_dim=16, attention_bias=True, use_sliding_window=True,
                                               sliding_window=5, max_window_layers=2),
        "alternating-layer_types-tied": dict(head_dim=8, use_sliding_window=True, sliding_window=4,
                                             tie_word_embeddings=True,
                                             layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
    },
    "Starcoder2": {
        "window-bias-tied": dict(sliding_window=5, norm_epsilon=1e-3),
        "full-nobias-untied-gelu-head_dim": dict(use_bias=False, tie_word_embeddings=False, hidden_act="gelu",
                                                 num_key_value_heads=1, head_dim=16),
    },
}
PARAMS = [(family, case) for family, cases in CASES.items() for case in cases]
SWAPPED = {"Mistral": "window-gqa-untied", "Qwen2": "top-layers-slide-untied",
           "Qwen3": "head_dim-bias-top-layer-slides", "Starcoder2": "window-bias-tied"}


def small(family: str, case: str):
    return tiny(family, **{**SMALL, **CASES[family][case]})


@pytest.mark.parametrize(("family", "case"), PARAMS)
def test_parity_and_round_trip(family, case, tmp_path, registry):
    hf_model = small(family, case)
    imported = check_family(hf_model, tmp_path, registry, length=LENGTH)
    exported = json.loads((tmp_path / "export" / "config.json").read_text())
    assert exported["architectures"] == [f"{family}ForCausalLM"]  # a Mistral exports as Mistral, not Llama
    if SWAPPED[family] == case:
        check_swaps_are_caught(imported, hf_model, LENGTH)


@pytest.mark.parametrize(("family", "case"), [("Mistral", "window-gqa-untied"), ("Starcoder2", "window-bias-tied"),
                                              ("Qwen3", "alternating-layer_types-tied")])
def test_the_window_is_exact_one_wider_or_narrower_is_caught(family, case, tmp_path, registry):
    """transformers' window (key j visible from query i when j > i - w) is blockspec's (the last w keys)."""
    hf_model = small(family, case)
    hf_model.save_pretrained(tmp_path)
    imported = import_hf(tmp_path, registry=registry).eval()
    ids = ids_for(hf_model, LENGTH)
    expected = logits(hf_model, ids)
    windowed = [m for m in imported.modules() if isinstance(m, CausalSelfAttention) and m.sliding_window]
    assert windowed
    for shift in (-1, 1):
        for module in windowed:
            module.sliding_window += shift
        assert (logits(imported, ids) - expected).abs().max().item() > bound(expected)
        for module in windowed:
            module.sliding_window -= shift


def test_qwen2_configs_without_layer_types_slide_the_layers_from_max_window_layers(tmp_path, registry):
    """Older transformers wrote no layer_types (and rope_theta at the top level): the same model."""
    hf_model = small("Qwen2", "top-layers-slide-untied")
    hf_model.save_pretrained(tmp_path)
    as_older_transformers(tmp_path, "layer_types")
    imported = check_import(hf_model, tmp_path, registry, length=LENGTH, what="config without layer_types")
    assert [imported.spec.layer(i).attention.config.sliding_window for i in range(3)] == [None, 5, 5]


# ---------------------------------------------------------------- released and default configs

RELEASED = {
    "Mistral": {  # Mistral-7B-v0.1
        "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
        "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
        "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0", "use_cache": True, "vocab_size": 32000,
    },
    "Qwen2": {  # Qwen2.5-0.5B
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
        "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24, "model_type": "qwen2",
        "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.40.1", "use_cache": True, "use_sliding_window": False, "use_mrope": False,
        "vocab_size": 151936,
    },
    "Qwen3": {  # Qwen3-0.6B
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
        "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960,
        "max_window_layers": 28, "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
        "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
    },
    "Starcoder2": {  # StarCoder2-3B
        "architectures": ["Starcoder2ForCausalLM"], "attention_dropout": 0.1, "residual_dropout": 0.1,
        "embedding_dropout": 0.1, "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 3072, "initializer_range": 0.018042, "intermediate_size": 12288,
        "max_position_embeddings": 16384, "mlp_type": "default", "model_type": "starcoder2", "norm_epsilon": 1e-05,
        "norm_type": "layer_norm", "num_attention_heads": 24, "num_hidden_layers": 30, "num_key_value_heads": 2,
        "rope_theta": 999999.4420358813, "sliding_window": 4096, "torch_dtype": "bfloat16",
        "transformers_version": "4.37.0.dev0", "use_bias": True, "use_cache": True, "vocab_size": 49152,
    },
}
COUNTS = {"Qwen2": 494_032_768}  # the figure for Qwen2.5-0.5B; the others are checked against transformers


@pytest.mark.parametrize("family", sorted(RELEASED))
def test_released_config_imports_and_counts_what_transformers_counts(family, registry):
    _, count = counted(family, RELEASED[family], registry)
    assert count == COUNTS.get(family, count)


@pytest.mark.parametrize("family", sorted(RELEASED))
def test_default_config_imports_and_counts_what_transformers_counts(family, registry):
    config = getattr(transformers, f"{family}Config")().to_dict()
    if family == "Starcoder2":  # its default bos/eos 50256 lie outside its default vocabulary; irrelevant here
        config.update(bos_token_id=None, eos_token_id=None)
    counted(family, config, registry)


def test_released_windows_and_options_read_as_transformers_builds_them(registry):
    mistral, qwen2, qwen3, starcoder2 = (structured(RELEASED[f], registry) for f in sorted(RELEASED))
    assert mistral.attention.config.sliding_window == 4096 and not mistral.layers
    assert qwen2.attention.config.sliding_window is None and qwen2.attention.config.qkv_bias and not qwen2.layers
    assert qwen3.model.head_dim == 128 and qwen3.attention.config.qk_norm == "head" and qwen3.head.config.tied
    assert starcoder2.attention.config.sliding_window == 4096 and starcoder2.norm.name == "layernorm"
    assert starcoder2.model.bias and starcoder2.activation.config.approximate == "tanh"


@pytest.mark.parametrize(("keys", "window"), [({}, 4096), ({"sliding_window": None}, None), ({"sliding_window": 7}, 7)])
def test_mistral_window_absent_is_the_config_default_and_null_is_none(keys, window, registry):
    config = {k: v for k, v in RELEASED["Mistral"].items() if k != "sliding_window"}
    assert structured({**config, **keys}, registry).attention.config.sliding_window == window


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(("family", "change", "key", "words"), [
    ("Mistral", {"layer_types": ["full_attention"] * 32}, "layer_types", "MinistralForCausalLM"),
    ("Mistral", {"hidden_act": "gelu"}, "hidden_act", "unsupported activation 'gelu'"),
    ("Mistral", {"partial_rotary_factor": 0.5}, "partial_rotary_factor", "partial RoPE"),
    ("Qwen2", {"use_mrope": True}, "use_mrope", "multimodal RoPE"),
    ("Qwen2", {"use_sliding_window": True, "layer_types": ["sliding_attention"] * 3}, "layer_types", "3 entries"),
    ("Qwen2", {"layer_types": ["chunked_attention"] * 24}, "layer_types", "unsupported layer type"),
    ("Qwen2", {"layer_types": ["sliding_attention"] * 24}, "layer_types", "without a window"),
    ("Qwen3", {"rope_scaling": {"rope_type": "longrope", "factor": 4.0}}, "rope_scaling.rope_type", "'longrope'"),
    ("Qwen3", {"attention_bias": "no"}, "attention_bias", "expected bool"),
    ("Starcoder2", {"norm_type": "rms_norm"}, "norm_type", "builds only 'layer_norm'"),
    ("Starcoder2", {"mlp_type": "gated"}, "mlp_type", "builds only 'default'"),
    ("Starcoder2", {"hidden_act": "quick_gelu"}, "hidden_act", "unsupported activation"),
    ("Starcoder2", {"rotary_dim": 64}, "rotary_dim", "unknown StarCoder2 config key"),
])
def test_what_a_family_cannot_express_is_refused_at_its_key(family, change, key, words):
    message = refused({**RELEASED[family], **change})
    assert len(message.splitlines()) == 1 and f"config.json: $.{key}: " in message and words in message


def test_exports_refuse_windows_the_config_cannot_say(registry):
    from blockspec.interop.families import mistral, qwen2

    top_layers = structured({**RELEASED["Qwen2"], "use_sliding_window": True, "max_window_layers": 20,
                             "sliding_window": 64}, registry)
    assert qwen2.FAMILY.misfits(top_layers) == []
    assert any("every layer" in p for p in mistral.FAMILY.misfits(top_layers))
    document = spec_dict(RELEASED["Qwen2"], file="config.json", name="m")
    document["layers"] = [{"to": 3, "attention": {"sliding_window": 8}},
                          {"from": 20, "attention": {"sliding_window": 9}}]
    assert any("2 widths" in p for p in qwen2.FAMILY.misfits(blockspec.structure_spec(document, registry)))
