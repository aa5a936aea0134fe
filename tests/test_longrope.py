"""LongRoPE (Phi-3.5, Phi-4-mini): per-pair factors, short within the original length, long past it, chosen per
call as transformers' forward does; parity with Phi3ForCausalLM both sides of the switch, the frequencies
against transformers', the KV cache within each regime, and refusals at their keys."""

from __future__ import annotations

import math

import pytest
import torch

from .hf_parity import assert_close, check_family, ids_for, logits, structured, tiny, transformers

import blockspec  # noqa: E402
from blockspec import SpecError, structure_spec  # noqa: E402
from blockspec.generation.tokens import generate, recompute_point  # noqa: E402
from blockspec.interop import export_hf, import_hf  # noqa: E402
from blockspec.interop.families import family_for, family_of_architecture  # noqa: E402
from blockspec.testing import Case  # noqa: E402
from blockspec.testing.properties.positional import check_relative_rotary  # noqa: E402
from blockspec_positional import RopeConfig  # noqa: E402
from blockspec_positional.rope import RotaryPositions, Scaling  # noqa: E402

from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

ORIGINAL, PAIRS = 8, 4  # the original length; head_dim 16 at fraction 0.5: 8 rotated features, 4 pairs
SHORT, LONG = [1.0, 1.25, 1.5, 2.0], [1.5, 3.0, 6.0, 12.0]
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=48, max_position_embeddings=32, original_max_position_embeddings=ORIGINAL,
             vocab_size=61, partial_rotary_factor=0.5, pad_token_id=None, eos_token_id=None)


def longrope(**options) -> dict:
    return {"rope_type": "longrope", "rope_theta": 500.0, "short_factor": SHORT, "long_factor": LONG,
            "partial_rotary_factor": 0.5, **options}


# ---------------------------------------------------------------- parity with transformers


@pytest.mark.parametrize("length", [6, 24], ids=["within-original", "past-original"])
@pytest.mark.parametrize("options", [{}, {"attention_factor": 1.3}], ids=["default-attention", "attention-1.3"])
def test_phi3_longrope_matches_transformers_both_ways(length, options, tmp_path, registry):
    """The prompt of check_family's cached decoding is length // 2: on the same side of the switch as the
    whole sequence, where cached and uncached decoding agree."""
    hf_model = tiny("Phi3", **SMALL, rope_parameters=longrope(**options))
    imported = check_family(hf_model, tmp_path, registry, length=length)
    config = imported.spec.positional.config
    assert (config.scaling, config.short_factor, config.long_factor) == ("longrope", tuple(SHORT), tuple(LONG))
    assert config.original_context_length == ORIGINAL


@pytest.mark.parametrize("kind", ["su", "yarn"])
def test_su_and_yarn_import_as_longrope_as_phi3config_reads_them(kind, registry):
    config = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", **SMALL,
              "rope_scaling": {"type": kind, "short_factor": SHORT, "long_factor": LONG}}
    assert structured(config, registry).positional.config.scaling == "longrope"


def test_a_given_factor_sets_the_attention_factor_as_transformers_does(registry):
    config = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", **SMALL,
              "rope_parameters": longrope(factor=2.0)}
    found = structured(config, registry).positional.config.attention_factor
    assert found == pytest.approx(math.sqrt(1 + math.log(2.0) / math.log(ORIGINAL)))


# ---------------------------------------------------------------- frequencies


@pytest.mark.parametrize("end", [1, ORIGINAL, ORIGINAL + 1, 100])
@pytest.mark.parametrize("context", [6, 8, 64])
def test_frequencies_and_attention_factor_equal_transformers(end, context):
    config = transformers.Phi3Config(hidden_size=64, num_attention_heads=4, max_position_embeddings=context,
                                     original_max_position_embeddings=ORIGINAL, rope_parameters=longrope())
    theirs, attention = ROPE_INIT_FUNCTIONS["longrope"](config, seq_len=end)
    rope = RotaryPositions(16, context, base=500.0, fraction=0.5, scaling=Scaling(
        kind="longrope", original_context_length=ORIGINAL, short_factor=tuple(SHORT), long_factor=tuple(LONG)))
    torch.testing.assert_close(rope.frequencies(end), theirs.double(), rtol=1e-6, atol=0)
    assert rope.attention_factor == pytest.approx(attention, rel=1e-12)
    turned, _ = rope.rotate(torch.ones(1, 1, end, 16), torch.ones(1, 1, end, 16))  # the tables agree too
    cos, sin = rope._full_tables(end)  # (end, 8) computed afresh
    want = torch.ones(end, 16)
    want[:, :8] = cos + torch.cat((-sin[:, 4:], sin[:, :4]), dim=-1)
    torch.testing.assert_close(turned[0, 0], want)


def rope_module(context: int = 32) -> RotaryPositions:
    return RotaryPositions(16, context, base=500.0, scaling=Scaling(
        kind="longrope", original_context_length=ORIGINAL, short_factor=tuple(SHORT * 2), long_factor=tuple(LONG * 2)))


@pytest.mark.parametrize(("first", "chunks"), [(0, (3, 2, 1, 2)), (9, (4, 1, 1, 30))])
def test_cached_rotation_equals_one_call_within_each_regime(first, chunks):
    """Calls that all end within the original length (short) or all past it (long), the table's end and
    past it: each chunk turns as the same rows of one call over 0..end-1 (the same regime)."""
    rope, end = rope_module(), first + sum(chunks)
    q, k = torch.randn(2, 1, 2, end, 16, dtype=torch.float64)  # (1, h, T, hs) each
    whole = rope.rotate(q, k, 0)
    starts = [first + sum(chunks[:i]) for i in range(len(chunks))]
    calls = ([(0, first)] if first else []) + [(s, s + n) for s, n in zip(starts, chunks)]
    for start, stop in calls:
        for got, want in zip(rope.rotate(q[..., start:stop, :], k[..., start:stop, :], start), whole):
            torch.testing.assert_close(got, want[..., start:stop, :], rtol=1e-6, atol=1e-6)


def test_a_call_past_the_original_length_turns_every_position_by_the_long_factors():
    rope = rope_module()
    q = torch.randn(1, 1, ORIGINAL + 1, 16)  # (1, 1, T, hs)
    short, _ = rope.rotate(q[..., :ORIGINAL, :], q[..., :ORIGINAL, :], 0)
    long, _ = rope.rotate(q, q, 0)
    assert not torch.allclose(short[..., 1:, :], long[..., 1:ORIGINAL, :], atol=1e-3)  # position 0 turns by 0


@pytest.mark.parametrize("tokens", [4, 12])
def test_the_kit_finds_longrope_relative_within_one_call(tokens, registry):
    model = blockspec.ModelConfig(d_model=32, n_heads=2, n_layers=1, vocab_size=11, context_length=32, d_ff=64)
    config = RopeConfig(scaling="longrope", original_context_length=ORIGINAL, short_factor=tuple(SHORT * 2),
                        long_factor=tuple(LONG * 2))
    case = Case(model=model, config=config, batch=1, tokens=tokens, seed=1, dtype="float64", factor=1.0,
                start=0, cut=0, trained=False)
    check_relative_rotary(registry.get("positional", "rope"), case, "cpu")


# ---------------------------------------------------------------- refusals


SPEC = {"model": {"d_model": 32, "n_heads": 2, "n_layers": 1, "vocab_size": 11, "context_length": 32, "d_ff": 64,
                  "bias": False},
        "norm": {"use": "rmsnorm"}, "activation": {"use": "swiglu"}, "head": {"use": "lm"}}


def problems(positional: dict, registry) -> list[str]:
    tree = {**SPEC, "positional": {"use": "rope", "scaling": "longrope", "original_context_length": 8,
                                   "short_factor": [1.0] * 8, "long_factor": [2.0] * 8, **positional}}
    with pytest.raises(SpecError) as caught:
        blockspec.build(structure_spec(tree, registry, file="m.toml"), registry=registry)
    return [f"{p.path}: {p.message}" for p in caught.value.problems]


@pytest.mark.parametrize(("change", "path", "says"), [
    ({"original_context_length": 1}, "$.positional.original_context_length", "expected an integer >= 2"),
    ({"original_context_length": 0}, "$.positional.original_context_length", ""),
    ({"short_factor": [1.0] * 3}, "$.positional.short_factor", "expected 8 entries"),
    ({"long_factor": [1.0] * 9}, "$.positional.long_factor", "found 9"),
    ({"long_factor": [1.0] * 7 + [0.0]}, "$.positional.long_factor", "positive finite"),
    ({"short_factor": [float("inf")] * 8}, "$.positional.short_factor", "finite"),
    ({"short_factor": []}, "$.positional.short_factor", "missing"),
    ({"short_factor": ["a"] * 8}, "$.positional.short_factor", ""),
    ({"scaling": "yarn", "factor": 2.0}, "$.positional.short_factor", "only for scaling = 'longrope'"),
])
def test_wrong_options_are_refused_at_their_key(change, path, says, registry):
    found = problems(change, registry)
    assert any(p.split(":")[0] in (path, *(f"{path}[{i}]" for i in range(9))) and says in p for p in found), found


def test_a_valid_longrope_spec_builds_and_round_trips(registry):
    tree = {**SPEC, "positional": {"use": "rope", "scaling": "longrope", "original_context_length": 8,
                                   "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}}
    spec = structure_spec(tree, registry, file="m.toml")
    assert blockspec.loads_spec(blockspec.dump_spec(spec), registry) == spec
    model = blockspec.build(spec, registry=registry)
    assert model(torch.zeros(1, 12, dtype=torch.long)).shape == (1, 12, 11)


# ---------------------------------------------------------------- export from the spec alone, and where it cannot go


def test_a_longrope_model_exports_as_phi3_from_its_spec_alone(tmp_path, registry):
    """No base config.json: the exported keys alone make transformers turn as blockspec does, both sides of
    the switch (the original length and the attention factor written out)."""
    hf_model = tiny("Phi3", **SMALL, rope_parameters=longrope())
    hf_model.save_pretrained(tmp_path / "hf")
    imported = import_hf(tmp_path / "hf", registry=registry)
    export_hf(imported, tmp_path / "export")
    back = transformers.Phi3ForCausalLM.from_pretrained(tmp_path / "export").eval()
    for length in (6, 24):
        ids = ids_for(hf_model, length)
        assert_close(logits(back, ids), logits(hf_model, ids), f"export, {length} tokens")


def test_only_phi3_exports_longrope_and_the_others_say_why():
    tree = {**SPEC, "positional": {"use": "rope", "scaling": "longrope", "original_context_length": 8,
                                   "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}}
    spec = structure_spec(tree, blockspec.load_registry(), file="m.toml")
    assert "Phi3ForCausalLM" in family_for(spec).architectures
    llama = family_of_architecture("LlamaForCausalLM").misfits(spec)
    assert '[positional] scaling = "longrope": blockspec imports longrope for Phi-3 (phi3) only' in llama


# ---------------------------------------------------------------- generation across the switch


def test_cached_generation_across_the_original_length_equals_uncached_and_transformers(tmp_path, registry):
    """A prompt within the original length, decoded past it: the step that first ends past it recomputes the
    cache (the short factors' keys turned again by the long ones), as transformers' Phi-3 generate does, so
    cached greedy decoding picks what uncached decoding and transformers pick, token for token."""
    hf_model = tiny("Phi3", **SMALL, rope_parameters=longrope())  # 32 positions: the switch at 8, decoded to 29
    hf_model.save_pretrained(tmp_path / "hf")
    model = import_hf(tmp_path / "hf", registry=registry)
    prompt = ids_for(hf_model, ORIGINAL - 3, batch=2)  # ends at position 4; decoding passes 8 at step 4
    new = 3 * ORIGINAL
    cached = generate(model, prompt, max_new_tokens=new, temperature=0.0)
    uncached = generate(model, prompt, max_new_tokens=new, temperature=0.0, use_cache=False)
    theirs = hf_model.generate(prompt, max_new_tokens=new, do_sample=False, min_new_tokens=new)  # prompt and new
    assert torch.equal(cached, uncached) and torch.equal(cached, theirs)
    assert recompute_point(model) == ORIGINAL
