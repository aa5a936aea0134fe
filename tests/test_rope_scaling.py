"""RoPE scaling (linear, dynamic NTK, llama3, yarn): the same frequencies and logits as transformers, read from
config.json in the old (rope_scaling) and new (rope_parameters) layouts, written back so from_pretrained
agrees, checked by the kit against formulas of its own, and spelled in TOML as [positional] options."""

from __future__ import annotations

import math

import attrs
import hypothesis
import pytest
import torch

from . import hf_parity
from .hf_parity import assert_close, bound, check_family, check_swaps_are_caught, ids_for, logits, tiny

import blockspec  # noqa: E402
from blockspec.errors import CheckpointError  # noqa: E402
from blockspec.interop import import_hf  # noqa: E402
from blockspec.interop.config_reader import ConfigReader, rope_theta  # noqa: E402
from blockspec.interop.families import family_named  # noqa: E402
from blockspec.interop.hf_config import spec_dict  # noqa: E402
from blockspec.testing import Case, PropertyFailure  # noqa: E402
from blockspec.testing.properties import find  # noqa: E402
from blockspec.testing.properties.rope import expected_frequency, expected_magnitude  # noqa: E402
from blockspec.testing.runner import check  # noqa: E402
from blockspec.testing.strategies import _valid_configs, configs  # noqa: E402
from blockspec.generation.tokens import generate  # noqa: E402
from blockspec_positional import RopeConfig  # noqa: E402
from blockspec_positional.rope import RotaryPositions, Scaling, scaled_frequencies  # noqa: E402

transformers = hf_parity.transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

CONTEXT, ORIGINAL, LENGTH = 16, 8, 40  # max_position_embeddings, the pre-scaling length, the test sequences
SIZES = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=50, max_position_embeddings=CONTEXT)
SCALED = {  # name -> rope_parameters (transformers 5 layout); the sequences reach past every length in them
    "linear": {"rope_type": "linear", "factor": 4.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": ORIGINAL},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL},
    "yarn-betas-untruncated": {"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": ORIGINAL,
                               "beta_fast": 8.0, "beta_slow": 2.0, "truncate": False},
    "yarn-mscale": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL,
                    "mscale": 0.707, "mscale_all_dim": 1.0},
}
LLAMA_31 = {  # meta-llama/Llama-3.1-8B config.json
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 128000,
    "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256,
}
LLAMA_32_1B = {**LLAMA_31, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "head_dim": 64,
               "rope_scaling": {**LLAMA_31["rope_scaling"], "factor": 32.0}, "tie_word_embeddings": True,
               "transformers_version": "4.45.0.dev0"}
LLAMA_33_70B = {**LLAMA_31, "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
                "num_attention_heads": 64, "eos_token_id": [128001, 128008, 128009],
                "transformers_version": "4.47.0.dev0"}


def scaled_llama(parameters: dict, **sizes):
    return tiny("Llama", rope_parameters={**parameters, "rope_theta": 1000.0}, **{**SIZES, **sizes})


def positional_of(config: dict) -> dict:
    return spec_dict(config, file="config.json", name="m")["positional"]


def refused(config: dict) -> str:
    with pytest.raises(CheckpointError) as caught:
        spec_dict(config, file="config.json", name="m")
    return str(caught.value)


# ---------------------------------------------------------------- parity with transformers


@pytest.mark.parametrize("name", ["linear", "llama3", "yarn", "yarn-mscale"])  # other betas: frequency tests
def test_llama_with_each_static_scaling_matches_transformers_both_ways(name, tmp_path, registry):
    imported = check_family(scaled_llama(SCALED[name]), tmp_path, registry, length=LENGTH)
    assert imported.spec.positional.config.scaling == SCALED[name]["rope_type"]


def test_the_old_rope_scaling_layout_imports_the_same_model(tmp_path, registry):
    """Written by transformers 4: rope_scaling under the old key "type", rope_theta at the top level."""
    hf_model = tiny("Llama", rope_scaling={"type": "linear", "factor": 4.0}, rope_theta=1000.0, **SIZES)
    imported = check_family(hf_model, tmp_path, registry, length=LENGTH)
    check_swaps_are_caught(imported, hf_model, length=LENGTH)


def test_dynamic_ntk_matches_transformers_uncached_and_cached(tmp_path, registry, monkeypatch):
    """Dynamic NTK turns each call by the frequencies of that call's end, so keys kept in a KV cache keep
    older frequencies: cached decoding differs from uncached decoding by design, in transformers as here.
    The harness's cached-equals-uncached check is swapped for what does hold: blockspec's cached greedy
    decoding picks what transformers' cached decoding picks, token for token."""
    hf_model = scaled_llama({"rope_type": "dynamic", "factor": 4.0})

    def like_transformers(model, prompt, new_tokens):
        fresh = scaled_llama({"rope_type": "dynamic", "factor": 4.0})  # transformers' rotary keeps state
        theirs = fresh.generate(prompt, max_new_tokens=new_tokens, do_sample=False,
                                attention_mask=torch.ones_like(prompt))
        assert torch.equal(generate(model, prompt, max_new_tokens=new_tokens, temperature=0.0), theirs)

    monkeypatch.setattr(hf_parity, "check_cached_generation", like_transformers)
    imported = check_family(hf_model, tmp_path, registry, length=LENGTH)
    prompt = ids_for(hf_model, CONTEXT)
    cached = generate(imported, prompt, max_new_tokens=LENGTH - CONTEXT, temperature=0.0)
    uncached = generate(imported, prompt, max_new_tokens=LENGTH - CONTEXT, temperature=0.0, use_cache=False)
    assert not torch.equal(cached, uncached)  # the documented difference shows at this length


@pytest.mark.parametrize("name", ["linear", "llama3", "yarn", "dynamic"])
def test_at_this_length_the_scaling_matters(name, tmp_path, registry):
    parameters = SCALED.get(name, {"rope_type": "dynamic", "factor": 4.0})
    hf_model = scaled_llama(parameters)
    hf_model.save_pretrained(tmp_path)
    imported = import_hf(tmp_path, registry=registry)
    plain = attrs.evolve(imported.spec, positional=attrs.evolve(imported.spec.positional, config=RopeConfig(
        base=imported.spec.positional.config.base)))
    unscaled = blockspec.build(plain, registry=registry)
    unscaled.load_state_dict(imported.state_dict())
    ids = ids_for(hf_model, LENGTH)
    expected = logits(hf_model, ids)
    assert_close(logits(imported, ids), expected, name)
    assert (logits(unscaled, ids) - expected).abs().max().item() > bound(expected)


# ---------------------------------------------------------------- frequencies


def transformers_frequencies(parameters: dict, head_dim: int = 16, context: int = 64, end: int | None = None,
                             fraction: float = 1.0):
    config = transformers.LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, max_position_embeddings=context,
                                      rope_parameters={"rope_theta": 500.0, **parameters})
    if fraction != 1.0:
        config.rope_parameters["partial_rotary_factor"] = fraction
    return ROPE_INIT_FUNCTIONS[parameters["rope_type"]](config, seq_len=end)


CONFIGS = [  # (rope_parameters, the same as RopeConfig options)
    ({"rope_type": "linear", "factor": 2.5}, dict(scaling="linear", factor=2.5)),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 32}, dict(scaling="llama3", factor=8.0, original_context_length=32)),
    ({"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 2.0, "high_freq_factor": 3.0,
      "original_max_position_embeddings": 100},
     dict(scaling="llama3", factor=32.0, original_context_length=100, low_freq_factor=2.0, high_freq_factor=3.0)),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
     dict(scaling="yarn", factor=4.0, original_context_length=32)),
    ({"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 50, "beta_fast": 16.0, "beta_slow": 2.0,
      "truncate": False, "attention_factor": 0.8},
     dict(scaling="yarn", factor=40.0, original_context_length=50, beta_fast=16.0, beta_slow=2.0, truncate=False,
          attention_factor=0.8)),
]


@pytest.mark.parametrize(("parameters", "options"), CONFIGS)
@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_static_frequencies_equal_transformers_and_the_kits_formula(parameters, options, fraction):
    theirs, attention = transformers_frequencies(parameters, fraction=fraction)
    rope = RotaryPositions(16, 64, base=500.0, fraction=fraction, scaling=Scaling(kind=options["scaling"], **{
        k: v for k, v in options.items() if k != "scaling"}))
    torch.testing.assert_close(rope.theta, theirs.double(), rtol=1e-6, atol=0)
    assert rope.attention_factor == pytest.approx(attention, rel=1e-12)
    config = RopeConfig(base=500.0, **options)
    kit = [expected_frequency(i, rope.rotary_dim, config, 64, 64) for i in range(rope.rotary_dim // 2)]
    torch.testing.assert_close(torch.tensor(kit, dtype=torch.float64), theirs.double(), rtol=1e-6, atol=0)
    assert expected_magnitude(config, 64) == pytest.approx(attention, rel=1e-12)


@pytest.mark.parametrize("end", [1, 64, 65, 100, 1000])
def test_dynamic_frequencies_follow_the_call_end_as_transformers_does(end):
    theirs, _ = transformers_frequencies({"rope_type": "dynamic", "factor": 3.0}, end=end)
    ours = scaled_frequencies(16, 500.0, Scaling(kind="dynamic", factor=3.0), 64, end)
    torch.testing.assert_close(ours, theirs.double(), rtol=1e-6, atol=0)
    kit = [expected_frequency(i, 16, RopeConfig(base=500.0, scaling="dynamic", factor=3.0), 64, end) for i in range(8)]
    torch.testing.assert_close(torch.tensor(kit, dtype=torch.float64), theirs.double(), rtol=1e-6, atol=0)


def test_yarn_scales_cos_and_sin_so_scores_grow_by_its_square():
    plain = RotaryPositions(8, 16)
    yarn = RotaryPositions(8, 16, scaling=Scaling(kind="yarn", factor=4.0, original_context_length=16))
    q, k = torch.randn(2, 1, 1, 5, 8, dtype=torch.float64)  # (1, 1, N, hs) each
    rq, rk = yarn.rotate(q, k, 3)
    magnitude = 0.1 * math.log(4.0) + 1
    assert yarn.attention_factor == pytest.approx(magnitude)
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1) * magnitude, rtol=1e-6, atol=0)
    pq, pk = plain.rotate(q, k, 3)
    assert not torch.allclose(rq @ rk.transpose(-1, -2), pq @ pk.transpose(-1, -2) * magnitude ** 2)  # θ differ


@pytest.mark.parametrize("prop", ["rope_frequencies", "relative", "rotation_norms", "partial_rotary"])
def test_the_kit_checks_every_scaling(prop, registry):
    result = check(registry.get("positional", "rope"), find(prop, "positional"), max_examples=30)
    assert result.status == "passed", result.message


def test_the_kit_draws_every_scaling_and_unsets_the_options_it_does_not_take():
    """configs() repairs a field the validators refuse: an option the scaling does not take falls back to its
    default, one it needs is drawn again, so every scaling is drawn without sinking nearly every draw."""
    seen = set()

    @hypothesis.settings(max_examples=200, database=None, derandomize=True)
    @hypothesis.given(configs(RopeConfig))
    def draw(config):
        seen.add(config.scaling)

    draw()
    assert seen == {"none", "linear", "dynamic", "llama3", "yarn", "longrope"}
    drawn = dict(base=500.0, layout="half", fraction=1.0, scaling="linear", factor=2.0, original_context_length=8,
                 low_freq_factor=2.0, high_freq_factor=None, attention_factor=1.5, beta_fast=4.0, beta_slow=None,
                 truncate=False)
    fixed = {name: hypothesis.strategies.just(value) for name, value in drawn.items()}
    assert repaired(fixed) == RopeConfig(base=500.0, scaling="linear", factor=2.0)
    fixed["factor"] = hypothesis.strategies.sampled_from([None, 3.0])  # a missing option is drawn again
    assert repaired(fixed).factor == 3.0


def repaired(strategies: dict) -> RopeConfig:
    """The config _valid_configs makes of these fields' draws (hypothesis' find: the first it accepts)."""
    return hypothesis.find(_valid_configs(RopeConfig, strategies, None), lambda config: True,
                           settings=hypothesis.settings(database=None, max_examples=50))


def test_the_kits_frequency_check_catches_a_wrong_formula(registry):
    rope = registry.get("positional", "rope")
    config = RopeConfig(scaling="llama3", factor=8.0, original_context_length=6)

    def off_by_one(config, ctx):  # llama3 bands placed for a context one longer than configured
        wrong = Scaling(kind="llama3", factor=config.factor, original_context_length=config.original_context_length + 1)
        return RotaryPositions(ctx.model.head_dim, ctx.model.context_length, base=config.base, scaling=wrong)

    model = blockspec.ModelConfig(vocab_size=3, context_length=16, d_model=32, n_layers=0, n_heads=2, d_ff=4)
    prop, case = find("rope_frequencies", "positional"), Case(model=model, config=config, start=20)
    prop(rope, case)
    with pytest.raises(PropertyFailure, match="scaling 'llama3' at context_length 16: θ per pair"):
        prop(attrs.evolve(rope, build=off_by_one), case)


# ---------------------------------------------------------------- config.json


@pytest.mark.parametrize(("config", "factor"), [(LLAMA_31, 8.0), (LLAMA_32_1B, 32.0), (LLAMA_33_70B, 8.0)])
def test_released_llama3_configs_import(config, factor, registry):
    spec = blockspec.structure_spec(spec_dict(config, file="config.json", name="m"), registry)
    rope = spec.positional.config
    assert (rope.scaling, rope.factor, rope.original_context_length) == ("llama3", factor, 8192)
    assert (rope.low_freq_factor, rope.high_freq_factor, rope.base) == (1.0, 4.0, 500000.0)
    theirs, _ = ROPE_INIT_FUNCTIONS["llama3"](transformers.LlamaConfig(**{
        k: v for k, v in config.items() if k not in ("architectures", "model_type")}))
    ours = scaled_frequencies(spec.model.head_dim, rope.base, Scaling(kind="llama3", factor=rope.factor,
                                                                      original_context_length=8192), 131072, 131072)
    torch.testing.assert_close(ours, theirs.double(), rtol=1e-6, atol=0)


LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "vocab_size": 50, "max_position_embeddings": 64}


@pytest.mark.parametrize("keys", [
    {"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}},  # Qwen2.5 style
    {"rope_parameters": {"rope_type": "yarn", "type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                         "original_max_position_embeddings": 16}},  # as transformers 5 saves an old config
    {"rope_parameters": {"rope_type": "yarn", "factor": 4.0}, "original_max_position_embeddings": 16},  # Phi-3 style
])
def test_each_layout_reads_the_same_yarn(keys):
    assert positional_of({**LLAMA, **keys}) == {"use": "rope", "base": 10000.0, "layout": "half", "scaling": "yarn",
                                                 "factor": 4.0, "original_context_length": 16}


def test_yarn_reads_as_transformers_resolves_it():
    deepseek = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 1.0}
    found = positional_of({**LLAMA, "rope_scaling": deepseek})
    assert found["attention_factor"] == pytest.approx((0.0707 * math.log(40) + 1) / (0.1 * math.log(40) + 1))
    assert (found["beta_fast"], found["beta_slow"], found["factor"]) == (32.0, 1.0, 40.0)
    lone = positional_of({**LLAMA, "rope_scaling": {"type": "yarn", "factor": 4.0, "mscale": 2.0}})
    assert "attention_factor" not in lone  # mscale without mscale_all_dim is unused by transformers
    assert positional_of({**LLAMA, "rope_scaling": {"type": "yarn", "factor": 4.0}})["original_context_length"] == 64


@pytest.mark.parametrize(("keys", "path", "words"), [
    ({"rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [2.0]}}, "$.rope_scaling.type",
     "RoPE scaling 'longrope' is not supported"),
    ({"rope_scaling": {"type": "su", "short_factor": [1.0], "long_factor": [2.0]}}, "$.rope_scaling.type", "'su'"),
    ({"rope_parameters": {"rope_type": "longrope", "factor": 2.0}}, "$.rope_parameters.rope_type", "'longrope'"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "mrope_section": [2, 2]}},
     "$.rope_parameters.mrope_section", "unknown key for rope_type 'linear'"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "$.rope_scaling.low_freq_factor", "missing"),
    ({"rope_scaling": {"type": "dynamic"}}, "$.rope_scaling.factor", "missing required key"),
    ({"rope_scaling": {"type": "linear", "rope_type": "dynamic", "factor": 2.0}}, "$.rope_scaling.type", "differs"),
    ({"rope_scaling": {"type": "linear", "factor": 2.0}, "rope_parameters": {"rope_type": "default"}},
     "$.rope_parameters.rope_type", "transformers reads rope_scaling when both are set"),
    ({"rope_scaling": {"type": "linear", "factor": 2.0}, "rope_parameters": {"rope_theta": 5e5}},
     "$.rope_parameters.rope_theta", "10000.0"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8},
      "original_max_position_embeddings": 16}, "$.original_max_position_embeddings", "uses the top-level one"),
    ({"rope_parameters": {"rope_type": "linear", "factor": "2"}}, "$.rope_parameters.factor", "expected float"),
])
def test_what_the_rope_cannot_express_is_refused_at_its_key(keys, path, words):
    message = refused({**LLAMA, **keys})
    assert f"config.json: {path}: " in message and words in message


def test_families_that_read_only_the_base_refuse_a_scaling():
    reader = ConfigReader({"rope_scaling": {"type": "linear", "factor": 2.0}}, "config.json")
    assert rope_theta(reader) == 10000.0
    assert [p.path for p in reader.problems] == ["$.rope_scaling.rope_type"]


@pytest.mark.parametrize("name", ["linear", "llama3", "yarn-betas-untruncated", "yarn-mscale"])
def test_a_scaled_llama_exports_both_layouts_and_reads_back_the_same(name, registry):
    config = {**LLAMA, "rope_parameters": SCALED[name]}
    spec = blockspec.structure_spec(spec_dict(config, file="config.json", name="m"), registry)
    written = family_named("llama").config_json(spec)
    kind = SCALED[name]["rope_type"]
    assert written["rope_parameters"]["rope_type"] == kind and written["rope_theta"] == 10000.0
    assert kind in (written["rope_scaling"].get("type"), written["rope_scaling"].get("rope_type"))
    reader = ConfigReader(written, "exported")
    assert family_named("llama").spec_dict(reader, "m")["positional"] == spec_dict(config, file="c", name="m")[
        "positional"] and reader.problems == []


def test_an_unscaled_export_is_unchanged(registry):
    spec = blockspec.structure_spec(spec_dict(LLAMA, file="config.json", name="m"), registry)
    written = family_named("llama").config_json(spec)
    assert "rope_scaling" not in written
    assert written["rope_parameters"] == {"rope_type": "default", "rope_theta": 10000.0}


# ---------------------------------------------------------------- the spec


SPEC = """[model]
vocab_size = 50
context_length = 64
d_model = 32
n_layers = 1
n_heads = 4
d_ff = 48
[norm]
use = "rmsnorm"
[activation]
use = "swiglu"
[head]
use = "lm"
[positional]
use = "rope"
"""
TOML = {
    "linear": 'scaling = "linear"\nfactor = 4.0\n',
    "dynamic": 'scaling = "dynamic"\nfactor = 2.0\n',
    "llama3": 'scaling = "llama3"\nfactor = 8.0\noriginal_context_length = 16\nhigh_freq_factor = 3.0\n',
    "yarn": 'scaling = "yarn"\nfactor = 4.0\noriginal_context_length = 16\nbeta_fast = 16.0\ntruncate = false\n',
}


@pytest.mark.parametrize("name", sorted(TOML))
def test_scaling_options_round_trip_through_toml(name, registry):
    spec = blockspec.loads_spec(SPEC + TOML[name], registry)
    text = blockspec.dump_spec(spec)
    assert TOML[name] in text and blockspec.loads_spec(text, registry) == spec
    model = blockspec.build(spec, registry=registry, seed=0)
    with torch.no_grad():
        assert torch.isfinite(model(torch.zeros(1, 80, dtype=torch.long))).all()


def test_specs_without_scaling_dump_as_before(registry, example_spec):
    text = blockspec.dump_spec(example_spec("llama2-7b"))
    assert "scaling" not in text and "factor" not in text
    dumped = blockspec.dump_spec(blockspec.loads_spec(SPEC, registry))
    assert '[positional]\nuse = "rope"\nbase = 10000.0\nlayout = "half"\n\n[' in dumped


@pytest.mark.parametrize(("options", "path", "words"), [
    ('factor = 2.0\n', "$.positional.factor", "only for scaling = 'linear' or 'dynamic' or 'llama3' or 'yarn'"),
    ('scaling = "yarn"\nfactor = 2.0\n', "$.positional.original_context_length", "missing: scaling = 'yarn' needs"),
    ('scaling = "linear"\nfactor = 2.0\nbeta_fast = 4.0\n', "$.positional.beta_fast", "only for scaling = 'yarn'"),
    ('scaling = "dynamic"\nfactor = 2.0\noriginal_context_length = 8\n', "$.positional.original_context_length",
     "found scaling = 'dynamic'"),
    ('scaling = "llama3"\nfactor = 8.0\noriginal_context_length = 8\nlow_freq_factor = 4.0\n',
     "$.positional.high_freq_factor", "expected a number > low_freq_factor = 4.0"),
    ('scaling = "linear"\nfactor = 0.5\n', "$.positional.factor", "expected a number >= 1.0"),
    ('scaling = "longrope"\n', "$.positional.short_factor", "missing: scaling = 'longrope' needs it"),
    ('scaling = "longrope"\nshort_factor = [1.0]\nlong_factor = [1.0]\noriginal_context_length = 8\nfactor = 2.0\n',
     "$.positional.factor", "only for scaling = 'linear' or 'dynamic' or 'llama3' or 'yarn'"),
])
def test_options_that_do_not_fit_the_scaling_are_refused_at_their_key(options, path, words, registry):
    with pytest.raises(blockspec.SpecError) as caught:
        blockspec.loads_spec(SPEC + options, registry)
    assert f"{path}: " in str(caught.value) and words in str(caught.value)


def test_each_dynamic_call_uses_the_frequencies_of_its_own_end():
    rope = RotaryPositions(8, 16, scaling=Scaling(kind="dynamic", factor=2.0))
    short, _ = rope.full_tables(16, 0)
    long, _ = rope.full_tables(32, 0)
    torch.testing.assert_close(short, rope.cos_full)  # within the context: unscaled, from the cached table
    assert not torch.allclose(long[:16], short)  # past it: every position of the call turns by the new θ
    later, _ = rope.full_tables(1, 31)
    torch.testing.assert_close(later, long[31:])  # one decoding step at 31 ends where the long call did

