"""Issue 25, the library API: one ``GenerationSettings`` for the command and the calls, and ``num_samples``."""

from __future__ import annotations

import json

import pytest
import torch

import blockspec
from blockspec import GenerationSettings
from blockspec.errors import InputError
from blockspec.generation.tokens import generate

from .test_gen_static import quick_compile  # noqa: F401  (a fixture)
from .test_gen_stops import NEW, PROMPT, make_tiny, run

pytest.importorskip("tokenizers")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, registry):
    return make_tiny(tmp_path_factory.mktemp("settings"), registry)


def test_the_settings_defaults_are_the_commands():
    from blockspec.cli import make_parser

    args = make_parser().parse_args(["generate", "ckpt", "--prompt", "x"])
    made = GenerationSettings()
    assert (made.temperature, made.seed, made.num_samples, made.overflow) == (
        args.temperature, args.seed, args.num_samples, args.overflow)


@pytest.mark.parametrize("field, value", [("top_p", 1.5), ("num_samples", 0), ("max_new_tokens", -1),
                                          ("stop", [""]), ("stop_ids", [1.5])])
def test_a_settings_object_outside_its_bounds_is_never_made(field, value):
    with pytest.raises(InputError, match=f"^{field}: "):
        GenerationSettings(**{field: value})


def test_an_unknown_keyword_is_refused_with_the_likely_one(tiny):
    with pytest.raises(InputError, match="'temprature' is not a generation setting; did you mean 'temperature'"):
        blockspec.generate(tiny["model"], PROMPT, temprature=0)


def test_a_settings_object_and_the_same_keywords_give_the_same_text(tiny):
    settings = GenerationSettings(max_new_tokens=NEW, temperature=0.9, top_p=0.8, seed=3)
    by_object = blockspec.generate(tiny["model"], "the", settings, tokenizer=tiny["bpe"])
    by_keywords = blockspec.generate(tiny["model"], "the", tokenizer=tiny["bpe"], max_new_tokens=NEW,
                                     temperature=0.9, top_p=0.8, seed=3)
    overridden = blockspec.generate(tiny["model"], "the", GenerationSettings(seed=3, top_p=0.8, temperature=0.9),
                                    tokenizer=tiny["bpe"], max_new_tokens=NEW)
    assert by_object == by_keywords == overridden


def test_sample_i_is_the_solo_run_seeded_seed_plus_i(tiny):
    ids = torch.tensor([PROMPT])  # (1, N)
    batch = generate(tiny["model"], ids, max_new_tokens=NEW, temperature=1.0, seed=7, num_samples=4)
    solos = [generate(tiny["model"], ids, max_new_tokens=NEW, temperature=1.0, seed=7 + i)[0] for i in range(4)]
    assert batch.shape == (4, len(PROMPT) + NEW)
    assert batch.tolist() == [solo.tolist() for solo in solos]
    assert len({tuple(row) for row in batch.tolist()}) > 1  # the samples differ


def test_samples_of_several_prompts_come_prompt_by_prompt(tiny):
    made = blockspec.generate(tiny["model"], ["the", "and so"], tokenizer=tiny["bpe"], max_new_tokens=6,
                              num_samples=2, seed=1)
    alone = [blockspec.generate(tiny["model"], prompt, tokenizer=tiny["bpe"], max_new_tokens=6, seed=1 + i)
             for prompt in ("the", "and so") for i in range(2)]
    assert [m.text for m in made] == [a.text for a in alone]


def test_a_sample_that_stops_early_is_cut_at_its_stop(tiny):
    free = blockspec.generate(tiny["model"], "the", tokenizer=tiny["bpe"], max_new_tokens=NEW, temperature=0,
                              eos=False)
    stop = free.text[len("the"):][3:5]
    made = blockspec.generate(tiny["model"], "the", tokenizer=tiny["bpe"], max_new_tokens=NEW, temperature=0,
                              num_samples=2, stop=stop)
    assert all(m.stop_reason == "stop" and m.text[len("the"):].endswith(stop) for m in made)
    assert made[0].text == made[1].text  # greedy: every sample is the same


def test_the_command_prints_each_sample(tiny, capsys):
    code, out, _ = run(capsys, "generate", tiny["root"] / "ckpt", "--prompt", "the", "--num-samples", "3",
                       "--max-new-tokens", "5", "--seed", "2", "--json")
    records = json.loads(out)
    expected = blockspec.generate(tiny["root"] / "ckpt", "the", max_new_tokens=5, seed=2, num_samples=3)
    assert code == 0 and [r["text"] for r in records] == [g.text for g in expected]


@pytest.mark.parametrize("flags, message", [(["--num-samples", "0"], "--num-samples: expected an integer from 1"),
                                            (["--num-samples", "2", "--stream"], "--stream: streams one text")])
def test_the_command_refuses_bad_sample_counts_in_one_line(tiny, capsys, flags, message):
    code, out, err = run(capsys, "generate", tiny["root"] / "ckpt", "--prompt", "the", *flags)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_the_command_with_compile_prints_what_it_prints_without(tiny, capsys, quick_compile):
    line = ["generate", tiny["root"] / "ckpt", "--prompt", "the", "--prompt", "and so", "--max-new-tokens", "6",
            "--seed", "3", "--json"]
    code, out, err = run(capsys, *line)
    code_compiled, out_compiled, err_compiled = run(capsys, *line, "--compile")
    assert (code, code_compiled) == (0, 0), err_compiled
    assert json.loads(out_compiled) == json.loads(out) and len(quick_compile) == 1


def test_compile_and_no_cache_on_the_command_line_is_one_line(tiny, capsys):
    code, _, err = run(capsys, "generate", tiny["root"] / "ckpt", "--prompt", "the", "--compile", "--no-cache")
    assert code == 2 and err.startswith("blockspec: error: --compile: expected the KV cache on")
