"""Sampling filters and penalties (issue 25): each equals Hugging Face's warper or processor on the same logits,
their composition follows HF's order, greedy decoding with a repetition penalty picks HF ``generate``'s tokens,
and the command refuses a value out of bounds in one line."""

from __future__ import annotations

import json
import os

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

import blockspec  # noqa: E402
import blockspec.cli  # noqa: E402
from blockspec.errors import InputError  # noqa: E402
from blockspec.generation.processors import (TokenCounts, min_p_filtered, presence_frequency_penalized,  # noqa: E402
                                             repetition_penalized, temperature_scaled, top_k_filtered,
                                             top_p_filtered)
from blockspec.generation.tokens import generate, sample  # noqa: E402
from blockspec.interop import import_hf  # noqa: E402

from .cli_assets import make_assets  # noqa: E402
from .hf_parity import tiny  # noqa: E402
from .specs import spec_text  # noqa: E402

WIDTH = 12
NO_IDS = torch.zeros((1, 0), dtype=torch.long)
# a few values, so draws hold ties; -inf as an earlier filter leaves it (never all of a row: the top stays)
VALUES = st.sampled_from([-3.0, -1.0, 0.0, 0.5, 2.0, 2.0, 4.5, float("-inf")])
ROWS = st.lists(st.lists(VALUES, min_size=WIDTH, max_size=WIDTH), min_size=1, max_size=3)


def logits_of(rows: list[list[float]]) -> torch.Tensor:
    """(B, WIDTH) float32 logits whose first entry is finite, as a model's are."""
    logits = torch.tensor(rows)
    logits[:, 0] = torch.where(torch.isinf(logits[:, 0]), 1.0, logits[:, 0])
    return logits


def same_distribution(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    torch.testing.assert_close(ours.softmax(-1), theirs.softmax(-1), atol=1e-6, rtol=0)


@given(ROWS, st.sampled_from([0.05, 0.3, 0.5, 0.77, 0.9, 1.0]))
def test_top_p_equals_hugging_faces_warper(rows, top_p):
    logits = logits_of(rows)
    same_distribution(top_p_filtered(logits, top_p), transformers.TopPLogitsWarper(top_p)(NO_IDS, logits))


@given(ROWS, st.sampled_from([0.0, 0.01, 0.1, 0.3, 0.8, 1.0]))
def test_min_p_equals_hugging_faces_warper(rows, min_p):
    logits = logits_of(rows)
    same_distribution(min_p_filtered(logits, min_p), transformers.MinPLogitsWarper(min_p)(NO_IDS, logits))


@given(ROWS, st.integers(1, WIDTH + 2))
def test_top_k_equals_hugging_faces_warper(rows, top_k):
    logits = logits_of(rows)
    same_distribution(top_k_filtered(logits, top_k), transformers.TopKLogitsWarper(top_k)(NO_IDS, logits))


@given(ROWS, st.sampled_from([0.1, 0.7, 1.0, 1.5, 3.0]))
def test_temperature_equals_hugging_faces_warper(rows, temperature):
    logits = logits_of(rows)
    theirs = transformers.TemperatureLogitsWarper(temperature)(NO_IDS, logits)
    same_distribution(temperature_scaled(logits, temperature), theirs)


@given(ROWS, st.lists(st.integers(0, WIDTH - 1), min_size=1, max_size=6), st.sampled_from([0.5, 1.3, 2.0]))
def test_the_repetition_penalty_equals_hugging_faces_processor(rows, seen_ids, penalty):
    logits = logits_of(rows)
    ids = torch.tensor([seen_ids] * logits.shape[0])  # (B, S)
    counts = TokenCounts.start(ids, WIDTH)
    theirs = transformers.RepetitionPenaltyLogitsProcessor(penalty)(ids, logits.clone())
    assert torch.equal(repetition_penalized(logits, counts.seen(), penalty), theirs)


@given(ROWS, st.lists(st.integers(0, WIDTH - 1), min_size=1, max_size=6), st.sampled_from([1.0, 1.4]),
       st.sampled_from([0.3, 1.0]), st.integers(1, WIDTH), st.sampled_from([0.4, 0.9, 1.0]),
       st.sampled_from([0.0, 0.05, 0.2]))
def test_the_composition_follows_hugging_faces_order(rows, seen_ids, penalty, temperature, top_k, top_p, min_p):
    """``sample``'s distribution (multinomial's input, read through a patched draw) is HF's processor list's."""
    logits = logits_of(rows)
    ids = torch.tensor([seen_ids] * logits.shape[0])  # (B, S)
    hf = transformers.LogitsProcessorList([
        transformers.RepetitionPenaltyLogitsProcessor(penalty), transformers.TemperatureLogitsWarper(temperature),
        transformers.TopKLogitsWarper(top_k), transformers.TopPLogitsWarper(top_p),
        transformers.MinPLogitsWarper(min_p)])
    drawn: list[torch.Tensor] = []
    original = torch.multinomial
    torch.multinomial = lambda p, n, generator=None: drawn.append(p) or original(p, n, generator=generator)
    try:
        sample(logits, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
               repetition_penalty=penalty, counts=TokenCounts.start(ids, WIDTH))
    finally:
        torch.multinomial = original
    torch.testing.assert_close(drawn[0], hf(ids, logits.clone()).softmax(-1), atol=1e-6, rtol=0)


@given(ROWS, st.lists(st.integers(0, WIDTH - 1), max_size=8), st.floats(-2, 2), st.floats(-2, 2))
def test_presence_and_frequency_follow_the_formula_over_generated_tokens(rows, generated, presence, frequency):
    logits = logits_of(rows)
    counts = TokenCounts.start(torch.tensor([[0, 1]] * logits.shape[0]), WIDTH)  # the prompt is not counted
    for token in generated:
        counts.add(torch.full((logits.shape[0], 1), token))
    expected = logits.clone()
    for token in set(generated):
        expected[:, token] -= presence + frequency * generated.count(token)
    torch.testing.assert_close(presence_frequency_penalized(logits, counts.generated, presence, frequency), expected,
                               atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def llama(tmp_path_factory, registry):
    """A tiny random Llama and its import into blockspec: the same weights in both libraries."""
    hf_model = tiny("Llama", hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=40, max_position_embeddings=64)
    folder = tmp_path_factory.mktemp("llama")
    hf_model.save_pretrained(folder)
    return hf_model, import_hf(folder, registry=registry)


@pytest.mark.parametrize("penalty", [1.0, 1.5, 3.0, 0.7])
def test_greedy_with_a_repetition_penalty_is_hugging_faces_generate(llama, penalty):
    hf_model, ours = llama
    prompt = torch.tensor([[3, 17, 3, 8, 21], [5, 5, 9, 30, 2]])  # (B, N)
    theirs = hf_model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=16, do_sample=False,
                               repetition_penalty=penalty, pad_token_id=0, eos_token_id=None)
    assert torch.equal(generate(ours, prompt, max_new_tokens=16, temperature=0.0, repetition_penalty=penalty), theirs)


def test_a_penalty_changes_greedy_output(llama):
    """The parity above is not vacuous: with this prompt the penalty picks other tokens."""
    _, ours = llama
    prompt = torch.tensor([[3, 17, 3, 8, 21]])
    assert not torch.equal(generate(ours, prompt, max_new_tokens=16, temperature=0.0),
                           generate(ours, prompt, max_new_tokens=16, temperature=0.0, repetition_penalty=3.0))


@pytest.fixture(scope="module")
def model(registry):
    text = spec_text(name="filters", vocab_size=29, context_length=32, d_model=32, n_layers=1, n_heads=4, d_ff=48,
                     positional="rope")
    return blockspec.build(blockspec.loads_spec(text, registry), registry=registry, seed=0).eval()


def test_filters_off_give_todays_output(model):
    """Off is off: the defaults, and explicit neutral values, give the same greedy and seeded tokens."""
    prompt = torch.tensor([[1, 2, 3]])
    neutral = dict(top_p=1.0, min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
    for temperature in (0.0, 0.9):
        plain = generate(model, prompt, max_new_tokens=12, temperature=temperature, seed=4)
        assert torch.equal(generate(model, prompt, max_new_tokens=12, temperature=temperature, seed=4, **neutral), plain)


def test_greedy_takes_the_argmax_after_presence_and_frequency_penalties(model):
    """A large frequency penalty, greedy: the argmax is taken after it, so the output varies."""
    prompt = torch.tensor([[1]])
    plain = generate(model, prompt, max_new_tokens=20, temperature=0.0)[0, 1:].tolist()
    penalized = generate(model, prompt, max_new_tokens=20, temperature=0.0, frequency_penalty=2.0,
                         presence_penalty=2.0)[0, 1:].tolist()
    assert len(set(penalized)) > len(set(plain))


@pytest.mark.parametrize(("name", "value"), [("top_p", 0.0), ("top_p", 1.5), ("min_p", -0.1), ("min_p", 1.01),
                                             ("repetition_penalty", 0.0), ("repetition_penalty", float("inf")),
                                             ("presence_penalty", 2.5), ("frequency_penalty", float("nan")),
                                             ("top_p", True)])
def test_an_argument_out_of_bounds_is_an_input_error_naming_it(model, name, value):
    with pytest.raises(InputError) as refused:
        generate(model, torch.tensor([[1, 2]]), max_new_tokens=2, **{name: value})
    assert [problem.path for problem in refused.value.problems] == [name]


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--top-p", "1.5", "--top-p: expected a number in (0, 1]"),
    ("--top-p", "0", "--top-p: expected a number in (0, 1]"),
    ("--min-p", "-0.5", "--min-p: expected a number in [0, 1]"),
    ("--repetition-penalty", "0", "--repetition-penalty: expected a number > 0"),
    ("--presence-penalty", "3", "--presence-penalty: expected a number from -2 to 2"),
    ("--frequency-penalty", "nan", "--frequency-penalty: expected a number from -2 to 2"),
])
def test_the_command_refuses_a_bad_filter_in_one_line(capsys, tmp_path, flag, value, said):
    code = blockspec.cli.main(["generate", str(tmp_path / "missing"), "--prompt", "to", flag, value])
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith(f"blockspec: error: {said}") and err.count("\n") == 1 and not out, err


def test_the_command_passes_the_filters_to_generate(capsys, tmp_path_factory):
    """``--repetition-penalty`` and the rest reach ``generate``: the command prints what the library makes."""
    assets = make_assets(tmp_path_factory.mktemp("assets"))
    capsys.readouterr()  # what training printed
    flags = {"top_p": 0.9, "min_p": 0.05, "repetition_penalty": 1.8, "presence_penalty": 0.5, "frequency_penalty": 0.3}
    line = ["generate", str(assets.char_ckpt), "--prompt", "to", "--max-new-tokens", "12", "--device", "cpu", "--json"]
    for name, value in flags.items():
        line += [f"--{name.replace('_', '-')}", str(value)]
    assert blockspec.cli.main(line) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = blockspec.generate(str(assets.char_ckpt), "to", max_new_tokens=12, device="cpu", **flags)
    assert tuple(printed["ids"]) == expected.ids
