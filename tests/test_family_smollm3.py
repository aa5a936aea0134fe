"""SmolLM3 (SmolLM3ForCausalLM): parity with transformers for regular and irregular NoPE layers, config.json as
released and as transformers writes it without layer_types or no_rope_layers, parameter counts, refusals, and
what an export as SmolLM3 (and only SmolLM3) holds: layers that skip RoPE."""

from __future__ import annotations

import attrs
import pytest

import blockspec
from blockspec.assembly.counting import count_parameters
from blockspec.interop.families import family_for, family_named
from blockspec.interop.hf_config import spec_dict

from .hf_parity import (as_older_transformers, check_family, check_import, check_swaps_are_caught, counted,
                        export_count, refused, structured, tiny, transformers)

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

SMALL = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=64, pad_token_id=None, bos_token_id=None, eos_token_id=None)  # ids: 128k vocab
CASES = {  # every feature: NoPE every k-th layer or irregular, grouped kv heads, windows, head_dim, scaling, tying
    "gqa-every4th-untied-v61": dict(vocab_size=61, num_hidden_layers=8, num_key_value_heads=2,
                                    tie_word_embeddings=False),
    "mha-irregular-tied-v53": dict(vocab_size=53, num_hidden_layers=5, num_key_value_heads=4,
                                   no_rope_layers=[0, 1, 1, 0, 0], rope_parameters={"rope_type": "default",
                                                                                    "rope_theta": 500.0}),
    "gqa-window5-on-nope-layers-v47": dict(vocab_size=47, num_key_value_heads=2, no_rope_layer_interval=2,
                                           use_sliding_window=True, sliding_window=5),
    "gqa-typed-window7-head_dim16-yarn-v59": dict(
        vocab_size=59, num_key_value_heads=1, head_dim=16, use_sliding_window=True, sliding_window=7,
        layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}),
}
LAYERS = {  # the [[layers]] each case imports as: NoPE layers, then the sliding ones
    "gqa-every4th-untied-v61": [{"every": 4, "offset": 3, "positional": {"use": "none"}}],
    "mha-irregular-tied-v53": [{"index": [0, 3, 4], "positional": {"use": "none"}}],
    "gqa-window5-on-nope-layers-v47": [{"every": 2, "offset": 1, "positional": {"use": "none"}},
                                       {"every": 2, "offset": 1, "attention": {"sliding_window": 5}}],
    "gqa-typed-window7-head_dim16-yarn-v59": [{"index": [3], "positional": {"use": "none"}},  # one: no pattern
                                              {"index": [1, 2], "attention": {"sliding_window": 7}}],
}
SMOLLM3_3B = {  # HuggingFaceTB/SmolLM3-3B config.json: its architecture keys and token ids, as released
    "architectures": ["SmolLM3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": None,
    "eos_token_id": 128012, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 11008,
    "max_position_embeddings": 65536, "mlp_bias": False, "model_type": "smollm3", "no_rope_layer_interval": 4,
    "no_rope_layers": [1, 1, 1, 0] * 9, "num_attention_heads": 16, "num_hidden_layers": 36, "num_key_value_heads": 4,
    "pad_token_id": 128004, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 5000000.0,
    "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_sliding_window": False,
    "vocab_size": 128256,
}
SMOLLM3_3B_COUNT = 3_075_098_624


def config_json(**change) -> dict:
    """A small SmolLM3 config.json, ``change`` applied."""
    return {"architectures": ["SmolLM3ForCausalLM"], **SMALL, "vocab_size": 50, **change}


@pytest.mark.parametrize("case", CASES)
def test_parity_import_checkpoint_export(case, tmp_path, registry):
    hf_model = tiny("SmolLM3", **SMALL | CASES[case])
    imported = check_family(hf_model, tmp_path, registry, length=24)
    assert imported.spec.layers == structured_layers(case, registry)
    if case.startswith("gqa-every"):
        check_swaps_are_caught(imported, hf_model, length=24)


def structured_layers(case: str, registry) -> tuple:
    """The [[layers]] entries LAYERS says ``case`` imports as, as a spec holds them."""
    document = spec_dict(config_json(**CASES[case]), file="config.json", name="m")
    assert document["layers"] == LAYERS[case]
    return blockspec.structure_spec(document, registry).layers


def test_a_config_without_layer_types_or_no_rope_layers_imports_the_same_model(tmp_path, registry):
    """As a config.json written by hand (or before transformers wrote layer_types) has it: SmolLM3Config makes
    every interval-th layer NoPE, and slides the NoPE layers' attention; rope_theta at the top level."""
    hf_model = tiny("SmolLM3", **SMALL | CASES["gqa-window5-on-nope-layers-v47"])
    hf_model.save_pretrained(tmp_path)
    as_older_transformers(tmp_path, "layer_types", "no_rope_layers")
    imported = check_import(hf_model, tmp_path, registry, length=24, what="no layer_types or no_rope_layers")
    windows = [imported.spec.layer(i).attention.config.sliding_window for i in range(4)]
    assert windows == [None, 5, None, 5]


def test_absent_keys_take_smollm3s_defaults_not_llamas(registry):
    """No rope_theta: 2e6 (SmolLM3Config.default_theta); no kv head count: 4; no tie_word_embeddings: tied."""
    spec, hf_config = structured(config_json(num_attention_heads=8), registry), transformers.SmolLM3Config()
    assert spec.positional.config.base == hf_config.rope_parameters["rope_theta"] == 2e6
    assert (spec.model.kv_heads, spec.head.config.tied) == (hf_config.num_key_value_heads, True) == (4, True)


def test_a_null_kv_head_count_is_one_per_query_head(registry):
    assert structured(config_json(num_attention_heads=8, num_key_value_heads=None), registry).model.kv_heads == 8


@pytest.mark.parametrize("config", [SMOLLM3_3B, transformers.SmolLM3Config().to_dict()],
                         ids=["smollm3-3b", "transformers-default"])
def test_released_and_default_configs_import_with_transformers_parameter_count(config, registry):
    spec, _ = counted("SmolLM3", config, registry)
    nope = [i for i in range(spec.model.n_layers) if spec.layer(i).positional.name == "none"]
    assert nope == list(range(3, 36, 4))


def test_smollm3_3b_counts_as_released_and_is_the_example_spec(registry, example_spec):
    """The import is examples/specs/smollm3-3b.toml's model, layer for layer."""
    spec, example = structured(SMOLLM3_3B, registry), example_spec("smollm3-3b")
    assert count_parameters(spec, registry).exact == count_parameters(example, registry).exact == SMOLLM3_3B_COUNT
    assert spec.model == attrs.evolve(example.model, name="m")
    assert [spec.layer(i) for i in range(36)] == [example.layer(i) for i in range(36)]
    assert (spec.positional, spec.head, spec.layers) == (example.positional, example.head, example.layers)


def test_the_smollm3_example_spec_exports_as_smollm3_with_its_count(registry, example_spec):
    assert export_count(example_spec("smollm3-3b"), "smollm3", "SmolLM3", registry) == SMOLLM3_3B_COUNT


def test_no_rope_layers_past_the_last_layer_go_unread_as_in_transformers(registry):
    """SmolLM3Config documents no_rope_layers as at least one entry per layer; SmolLM3Attention reads layer i's."""
    spec = structured(config_json(no_rope_layers=[1, 0, 1, 1, 0, 0]), registry)
    assert [spec.layer(i).positional.name for i in range(4)] == ["rope", "none", "rope", "rope"]


def test_keys_smollm3_checkpoints_carry_but_smollm3_never_reads_are_accepted(registry):
    """pretraining_tp (a tensor-parallel split of the same sums) and max_window_layers (Qwen2's key)."""
    assert structured(config_json(pretraining_tp=2, max_window_layers=28), registry).model.n_layers == 4


@pytest.mark.parametrize(("change", "key", "says"), [
    ({"no_rope_layers": [1, 2, 1, 0]}, "$.no_rope_layers", "unsupported entry 2"),
    ({"no_rope_layers": [1, True, 1, 0]}, "$.no_rope_layers", "unsupported entry True"),
    ({"no_rope_layers": [1, 1, 0]}, "$.no_rope_layers", "3 entries for num_hidden_layers = 4"),
    ({"no_rope_layer_interval": 0}, "$.no_rope_layer_interval", "expected a positive integer"),
    ({"layer_types": ["full_attention", "chunked_attention", "full_attention", "full_attention"]},
     "$.layer_types", "unsupported layer type 'chunked_attention'"),
    ({"layer_types": ["full_attention"] * 3}, "$.layer_types", "3 entries for num_hidden_layers = 4"),
    ({"layer_types": ["sliding_attention"] * 4, "sliding_window": 8}, "$.layer_types",
     "sliding_attention layers without a window"),
    ({"hidden_act": "gelu"}, "$.hidden_act", "unsupported activation"),
    ({"partial_rotary_factor": 0.5}, "$.partial_rotary_factor", "partial RoPE"),
    ({"rope_parameters": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}},
     "$.rope_parameters.rope_type", "'longrope' is not supported"),
    ({"use_mrope": True}, "$.use_mrope", "unknown SmolLM3 config key"),  # Qwen2's, not SmolLM3's
])
def test_keys_it_cannot_express_are_refused_at_the_key(change, key, says):
    message = refused(config_json(**change))
    assert len(message.splitlines()) == 1 and f"config.json: {key}: " in message and says in message


def spec_with(registry, layers: list[dict], **change) -> blockspec.ModelSpec:
    """The small SmolLM3 config's spec, its [[layers]] replaced by ``layers``."""
    document = spec_dict(config_json(**change), file="c", name="m")
    return blockspec.structure_spec({**document, "layers": layers}, registry)


def test_export_writes_no_rope_layers_and_the_interval_where_it_derives_them(registry):
    family = family_named("smollm3")
    every_fourth = family.config_json(spec_with(registry, [{"index": [3], "positional": {"use": "none"}}]))
    assert (every_fourth["no_rope_layers"], every_fourth["no_rope_layer_interval"]) == ([1, 1, 1, 0], 4)
    irregular = family.config_json(spec_with(registry, [{"index": [0, 2], "positional": {"use": "none"}}]))
    assert irregular["no_rope_layers"] == [0, 1, 0, 1] and "no_rope_layer_interval" not in irregular


def test_only_smollm3_exports_layers_that_skip_rope_and_llama_names_them(registry):
    spec = spec_with(registry, [{"every": 4, "offset": 3, "positional": {"use": "none"}}])
    assert family_for(spec).name == "smollm3" and family_named("smollm3").misfits(spec) == []
    assert family_named("llama").misfits(spec) == [
        "[[layers]]: layer 3 differs from the model-wide tables beyond its attention's sliding_window: the family "
        "configures every layer alike"]


def test_a_plain_llama_spec_still_exports_as_llama(registry):
    assert family_for(spec_with(registry, [])).name == "llama"


@pytest.mark.parametrize(("layers", "says"), [
    ([{"index": [1], "positional": {"base": 500.0}}], "[[layers]]: layer 1 differs from the model-wide tables "
     "beyond its attention's sliding_window and a positional 'none' (NoPE)"),
    ([{"index": [3], "positional": {"use": "none"}, "norm": {"eps": 1e-5}}], "[[layers]]: layer 3 differs"),
    ([{"index": [1], "attention": {"sliding_window": 4}}, {"index": [2], "attention": {"sliding_window": 8}}],
     "[attention] sliding_window: 2 widths [4, 8] across the layers"),
])
def test_export_names_what_smollm3_cannot_hold(layers, says, registry):
    problems = family_named("smollm3").misfits(spec_with(registry, layers))
    assert len(problems) == 1 and problems[0].startswith(says), problems
