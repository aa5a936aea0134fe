"""Phi-1, Phi-1.5, Phi-2 (PhiForCausalLM): parity with transformers, config.json as released and as transformers
4 and 5 write it, parameter counts, refusals, and what an export as Phi needs (one shared norm, a head bias)."""

from __future__ import annotations

import attrs
import pytest
import torch

import blockspec
from blockspec.assembly.counting import count_parameters
from blockspec.interop.families import family_for, family_named
from blockspec.interop.hf_config import spec_dict

from .hf_parity import (as_older_transformers, check_family, check_import, check_swaps_are_caught, counted,
                        export_count, refused, structured, tiny, transformers)

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=64)
CASES = {  # every feature: grouped kv heads, the default and given fractions, head_dim, scaling, tying, activation
    "gqa-half-untied-v61": dict(vocab_size=61, num_key_value_heads=2),
    "mha-quarter-tied-gelu-v53": dict(vocab_size=53, tie_word_embeddings=True, hidden_act="gelu", resid_pdrop=0.1,
                                      rope_parameters={"rope_type": "default", "rope_theta": 500.0,
                                                       "partial_rotary_factor": 0.25}),
    "mha-full-linear-head_dim16-relu-v47": dict(vocab_size=47, head_dim=16, hidden_act="relu",
                                                rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                                 "partial_rotary_factor": 1.0}),
    "mha-half-yarn-v59": dict(vocab_size=59, rope_parameters={"rope_type": "yarn", "factor": 4.0,
                                                              "original_max_position_embeddings": 16}),
}
PHI_2 = {  # microsoft/phi-2 config.json, as released (transformers 4.37)
    "_name_or_path": "microsoft/phi-2", "architectures": ["PhiForCausalLM"], "attention_dropout": 0.0,
    "bos_token_id": 50256, "embd_pdrop": 0.0, "eos_token_id": 50256, "hidden_act": "gelu_new", "hidden_size": 2560,
    "initializer_range": 0.02, "intermediate_size": 10240, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
    "model_type": "phi", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "partial_rotary_factor": 0.4, "qk_layernorm": False, "resid_pdrop": 0.1, "rope_scaling": None,
    "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.37.0",
    "use_cache": True, "vocab_size": 51200,
}


@pytest.mark.parametrize("case", CASES)
def test_parity_import_checkpoint_export(case, tmp_path, registry):
    hf_model = tiny("Phi", **SMALL, **CASES[case])
    imported = check_family(hf_model, tmp_path, registry, length=24)
    assert imported.spec.block.name == "parallel" and imported.spec.block.config.shared_norm
    if case.startswith("gqa"):
        assert imported.spec.positional.config.fraction == 0.5  # PhiConfig's default, written out by transformers 5
        check_swaps_are_caught(SwapsBeyondTheResidualSum(imported), hf_model, length=24)


class SwapsBeyondTheResidualSum(torch.nn.Module):
    """The import with each block's ffn.down.bias left out of the swaps: one shared norm puts it next to
    attn.proj.bias, and x + attn(h) + ffn(h) adds the two alike, so swapping them changes nothing, here as in
    transformers (the exported tensors, compared one by one, still tell them apart)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def named_parameters(self, *args, **kwargs):
        return ((n, p) for n, p in self.model.named_parameters() if not n.endswith(".ffn.down.bias"))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids)


@pytest.mark.parametrize(("keys", "fraction", "width"), [({"partial_rotary_factor": 0.4}, 0.4, 40), ({}, 0.5, 32)],
                         ids=["top-level-fraction", "no-fraction"])
def test_transformers_4_config_imports_the_same_model(keys, fraction, width, tmp_path, registry):
    """Phi-2's layout: rope_theta and partial_rotary_factor at the top level, rope_scaling null, no
    rope_parameters; without a fraction anywhere, PhiConfig's 0.5. Width 40 gives head_dim 10, where 0.4 turns
    4 features (Phi-2's 0.4 of 80 turns 32)."""
    hf_model = tiny("Phi", **{**SMALL, "hidden_size": width}, vocab_size=61,
                    rope_parameters={"rope_type": "default", "rope_theta": 2000.0, "partial_rotary_factor": fraction})
    hf_model.save_pretrained(tmp_path)
    as_older_transformers(tmp_path, rope_scaling=None, torch_dtype="float32", **keys)
    imported = check_import(hf_model, tmp_path, registry, length=24, what="transformers 4 layout")
    assert (imported.spec.positional.config.base, imported.spec.positional.config.fraction) == (2000.0, fraction)


@pytest.mark.parametrize("config", [PHI_2, transformers.PhiConfig().to_dict()], ids=["phi-2", "transformers-default"])
def test_released_and_default_configs_import_with_transformers_parameter_count(config, registry):
    spec, _ = counted("Phi", config, registry)
    assert (spec.block.name, spec.block.config.shared_norm, spec.head.config.bias) == ("parallel", True, True)


def test_phi_2_counts_as_released_and_is_the_example_spec(registry, example_spec):
    """The import is examples/specs/phi-2.toml's model, up to what the spec leaves to defaults (kv heads, the
    attention's distribution) and resid_pdrop, its one dropout rate."""
    spec, example = structured(PHI_2, registry), example_spec("phi-2")
    assert count_parameters(spec, registry).exact == count_parameters(example, registry).exact == 2_779_683_840
    assert spec.model == attrs.evolve(example.model, name="m", n_kv_heads=32, dropout=0.1)
    assert spec.attention.config == example.attention.config
    assert [getattr(spec, kind) for kind in ("block", "positional", "norm", "activation", "head", "ffn")] == \
        [getattr(example, kind) for kind in ("block", "positional", "norm", "activation", "head", "ffn")]


def test_small_config_counts_as_transformers_does(registry):
    config = {"architectures": ["PhiForCausalLM"], **SMALL, **CASES["mha-quarter-tied-gelu-v53"]}
    counted("Phi", config, registry)


def test_the_phi_2_example_spec_exports_as_phi_with_its_count(registry, example_spec):
    assert export_count(example_spec("phi-2"), "phi", "Phi", registry) == 2_779_683_840


@pytest.mark.parametrize(("change", "key", "says"), [
    ({"qk_layernorm": True}, "$.qk_layernorm", "LayerNorms of q and k"),
    ({"partial_rotary_factor": 0.375}, "$.partial_rotary_factor", "rotates 3 features"),
    ({"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.375}},
     "$.rope_parameters.partial_rotary_factor", "rotates 3 features"),
    ({"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.25}, "partial_rotary_factor": 0.5},
     "$.partial_rotary_factor", "differs from"),
    ({"rope_parameters": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}},
     "$.rope_parameters.rope_type", "'longrope'"),
    ({"hidden_act": "gelu_10"}, "$.hidden_act", "unsupported activation"),
    ({"use_parallel_residual": False}, "$.use_parallel_residual", "unknown Phi config key"),  # GPT-NeoX's, not Phi's
])
def test_keys_it_cannot_express_are_refused_at_the_key(change, key, says):
    message = refused({"architectures": ["PhiForCausalLM"], **SMALL, "vocab_size": 50, **change})
    assert len(message.splitlines()) == 1 and f"config.json: {key}: " in message and says in message


def phi_spec(registry, **tables) -> blockspec.ModelSpec:
    """The small Phi config's spec with ``tables`` replacing its own."""
    document = spec_dict({"architectures": ["PhiForCausalLM"], **SMALL, "vocab_size": 50}, file="c", name="m")
    return blockspec.structure_spec({**document, **tables}, registry)


@pytest.mark.parametrize(("tables", "says"), [
    ({"block": {"use": "parallel"}}, "block is 'parallel' without shared_norm, expected 'parallel' with shared_norm"),
    ({"block": {"use": "pre"}}, "block is 'pre', expected 'parallel' with shared_norm"),
    ({"head": {"use": "lm", "tied": False}}, "[head] bias = false: the family's output layer (lm_head) always"),
])
def test_export_names_what_phi_cannot_hold(tables, says, registry):
    problems = family_named("phi").misfits(phi_spec(registry, **tables))
    assert len(problems) == 1 and problems[0].startswith(says), problems


def test_a_phi_spec_exports_as_phi_and_no_two_norm_family_takes_it(registry):
    spec = phi_spec(registry)
    assert family_for(spec).name == "phi" and family_named("phi").misfits(spec) == []
    assert any("with shared_norm" in p for p in family_named("gpt_neox").misfits(spec))
