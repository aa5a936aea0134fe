"""Issue 25, stop conditions: an end-of-text or stop id, a stop string, and the token budget, per row.

Positions are checked against Hugging Face ``generate`` (greedy, ``eos_token_id`` / ``stop_strings``)
on the export of the same tiny model: the output ends with the token that completes the stop.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

import blockspec
from blockspec.cli import main
from blockspec.data.tokenizer import tokenizer_bytes, train_bpe
from blockspec.errors import InputError
from blockspec.generation.stopping import end_of_text_id
from blockspec.generation.tokens import generate
from blockspec.interop import export_hf

from .corpus import small_play
from .specs import spec_text
from .cli_run import run

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("tokenizers")
pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = [5, 77, 120, 9]
NEW = 24


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, registry):
    return make_tiny(tmp_path_factory.mktemp("stops"), registry)


def make_tiny(root, registry) -> dict:
    """A micro model, the byte-level BPE it goes with, a checkpoint carrying both, and its HF export."""
    bpe = train_bpe(iter([small_play(200)]), 300)
    spec = spec_text(name="stops", vocab_size=300, context_length=64, d_model=16, n_layers=1, n_heads=2, d_ff=32)
    (root / "spec.toml").write_text(spec)
    model = blockspec.build(blockspec.load_spec(root / "spec.toml", registry), registry=registry, seed=1).eval()
    files = {"tokenizer.json": tokenizer_bytes(bpe)}
    blockspec.save(model, root / "ckpt", extra_files=files)
    export_hf(model, root / "hf", extra_files=files)
    return {"model": model, "bpe": bpe, "root": root}


def greedy(model, prompt=PROMPT, **stops) -> list[int]:
    ids = torch.tensor([prompt])  # (1, N)
    return generate(model, ids, max_new_tokens=NEW, temperature=0, **stops)[0, len(prompt):].tolist()


def hf_greedy(tiny, prompts: list[list[int]], **settings) -> list[list[int]]:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tiny["root"] / "hf")).eval()
    out = hf.generate(torch.tensor(prompts), max_new_tokens=NEW, do_sample=False, **settings)
    return out[:, len(prompts[0]):].tolist()


def a_later_token(new: list[int], at: int) -> int:
    """A token whose first appearance in ``new`` is at ``at`` or later: a stop there cuts the run short."""
    return next(token for position, token in enumerate(new) if position >= at and token not in new[:position])


def test_a_stop_id_ends_where_hugging_faces_eos_token_id_does(tiny):
    free = greedy(tiny["model"])
    stop = a_later_token(free, 3)
    ours = greedy(tiny["model"], stop_ids=[stop])
    assert ours[-1] == stop and ours == free[:free.index(stop) + 1]  # the stop token is kept
    assert hf_greedy(tiny, [PROMPT], eos_token_id=stop, pad_token_id=stop) == [ours]


def test_a_finished_row_is_padded_with_the_stop_id_until_every_row_stops(tiny):
    other = [9, 200, 31, 4]
    free = greedy(tiny["model"])
    stop = a_later_token(free, 2)
    ids = torch.tensor([PROMPT, other])  # (2, N)
    ours = generate(tiny["model"], ids, max_new_tokens=NEW, temperature=0, stop_ids=[stop])[:, len(PROMPT):]
    assert ours.tolist() == hf_greedy(tiny, [PROMPT, other], eos_token_id=stop, pad_token_id=stop)
    first = ours[0].tolist()
    assert first[:first.index(stop) + 1] == free[:free.index(stop) + 1]
    assert set(first[first.index(stop):]) == {stop}


def test_a_stop_string_split_over_two_tokens_stops_at_the_token_that_completes_it(tiny):
    transformers = pytest.importorskip("transformers")
    bpe, free = tiny["bpe"], greedy(tiny["model"])
    pieces = [bpe.decode([token]) for token in free]
    printable = [piece.isascii() and piece.isprintable() and piece != "" for piece in pieces]
    at = next(i for i in range(1, NEW) if printable[i - 1] and printable[i]
              and pieces[i - 1][-1] + pieces[i][0] not in bpe.decode(free[:i]))
    stop = pieces[at - 1][-1] + pieces[at][0]  # the last character of one token, the first of the next
    ours = greedy(tiny["model"], stop=[stop], decode=bpe.decode)
    assert ours == free[:at + 1]
    hf_tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tiny["root"] / "hf" / "tokenizer.json"))
    assert hf_greedy(tiny, [PROMPT], stop_strings=[stop], tokenizer=hf_tokenizer, pad_token_id=0) == [ours]


def test_a_stop_string_in_the_prompt_does_not_count(tiny):
    """Hugging Face's criterion reads the whole sequence; ours reads the generated text only."""
    bpe = tiny["bpe"]
    prompt = bpe.encode("ROMEO:")
    stop = bpe.decode(prompt)
    assert greedy(tiny["model"], prompt, stop=[stop], decode=bpe.decode) == greedy(tiny["model"], prompt)


def test_generation_reports_why_it_stopped(tiny):
    model, bpe = tiny["model"], tiny["bpe"]
    eos = end_of_text_id(bpe)
    assert eos is not None and bpe.decode([eos]) == "<|endoftext|>"
    free = blockspec.generate(model, "the", tokenizer=bpe, temperature=0, max_new_tokens=NEW)
    assert free.stop_reason == "length" and len(free.new_ids) == NEW
    stop = bpe.decode(list(free.new_ids[:3]))[-2:]
    cut = blockspec.generate(model, "the", tokenizer=bpe, temperature=0, max_new_tokens=NEW, stop=[stop])
    assert cut.stop_reason == "stop" and stop in bpe.decode(list(cut.new_ids))
    assert stop not in bpe.decode(list(cut.new_ids[:-1]))


def test_eos_ends_a_generation_unless_turned_off(tiny):
    """The end-of-text id comes from the tokenizer: made the likeliest token, it ends the text at once."""
    model, bpe = tiny["model"], tiny["bpe"]
    eos = end_of_text_id(bpe)
    biased = _favouring(model, eos)
    stopped = blockspec.generate(biased, "the", tokenizer=bpe, temperature=0, max_new_tokens=5)
    assert stopped.new_ids == (eos,) and stopped.stop_reason == "eos"
    past = blockspec.generate(biased, "the", tokenizer=bpe, temperature=0, max_new_tokens=5, eos=False)
    assert past.new_ids == (eos,) * 5 and past.stop_reason == "length"


def _favouring(model, token: int):
    """A copy of ``model`` whose logits (B, T, V) all favour ``token`` by far."""
    import copy

    biased = copy.deepcopy(model)
    biased.register_forward_hook(lambda module, args, out: out + 1e4 * torch.nn.functional.one_hot(
        torch.tensor(token), out.shape[-1]))
    return biased


@pytest.mark.parametrize("stops, found", [({"stop_ids": [1.5]}, "stop_ids"), ({"stop": [""]}, "stop"),
                                          ({"stop": ["a"]}, "decode")])
def test_bad_stops_are_refused_before_the_first_step(tiny, stops, found):
    with pytest.raises(InputError, match=found):
        generate(tiny["model"], torch.tensor([PROMPT]), max_new_tokens=2, **stops)


def test_the_command_stops_at_a_stop_string_and_says_why(tiny, capsys):
    ckpt = tiny["root"] / "ckpt"
    code, out, _ = run(capsys, "generate", ckpt, "--prompt", "the", "--temperature", "0", "--max-new-tokens", NEW,
                       "--json")
    free = json.loads(out)
    stop = free["text"][len("the"):][2:4]
    code, out, _ = run(capsys, "generate", ckpt, "--prompt", "the", "--temperature", "0", "--max-new-tokens", NEW,
                       "--stop", "never said", "--stop", stop, "--json")
    cut = json.loads(out)
    assert code == 0 and cut["stop_reason"] == "stop" and cut["new_tokens"] < NEW
    assert free["text"].startswith(cut["text"]) and cut["text"].find(stop, len("the")) >= 0
    assert free["stop_reason"] == "length" and free["new_tokens"] == NEW


@pytest.mark.parametrize("flags, message", [(["--stop", ""], "--stop: expected at least one character"),
                                            (["--stream", "--ids", "1,2"], "--stream: streams text"),
                                            (["--no-eos", "--no-eos"], "--no-eos given twice")])
def test_bad_stop_flags_are_one_line_and_exit_2(tiny, capsys, flags, message):
    prompt = [] if "--ids" in flags else ["--prompt", "the"]
    code, _, err = run(capsys, "generate", tiny["root"] / "ckpt", *prompt, *flags)
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err


def test_a_stop_the_character_tokenizer_cannot_produce_is_a_warning(tmp_path, capsys, registry):
    (tmp_path / "play.txt").write_text(small_play(40))
    (tmp_path / "char.toml").write_text(spec_text(name="char", vocab_size=65, context_length=16, d_model=16,
                                                  n_layers=1, n_heads=2, d_ff=32))
    assert main(["train", str(tmp_path / "char.toml"), "--data", str(tmp_path / "play.txt"), "--steps", "1",
                 "--batch-size", "2", "--eval-batches", "1", "--eval-every", "0", "--quiet",
                 "--out", str(tmp_path / "ckpt")]) == 0
    code, out, err = run(capsys, "generate", tmp_path / "ckpt", "--prompt", "the", "--max-new-tokens", 3,
                         "--stop", "é")
    assert code == 0 and out.strip() and len(err.strip().splitlines()) == 1
    assert "warning" in err and "'é'" in err and "can never stop" in err


def test_a_finished_row_repeats_the_first_stop_id_given():
    from blockspec.generation.stopping import StopConditions

    stops = StopConditions(2, stop_ids=[7, 3])
    assert stops.step(torch.tensor([3, 5])).tolist() == [3, 5]
    assert stops.step(torch.tensor([9, 9])).tolist() == [7, 9] and not stops.all_finished()
    assert stops.step(torch.tensor([1, 7])).tolist() == [7, 7] and stops.all_finished()


def test_hugging_face_counts_the_prompts_text_and_blockspec_does_not(tiny):
    """The documented difference: a stop that begins in the prompt and ends in the first new token."""
    transformers = pytest.importorskip("transformers")
    bpe = tiny["bpe"]
    prompt = bpe.encode("ROMEO:")
    stop = ":" + bpe.decode(greedy(tiny["model"], prompt)[:1])[0]
    hf_tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tiny["root"] / "hf" / "tokenizer.json"))
    theirs = hf_greedy(tiny, [prompt], stop_strings=[stop], tokenizer=hf_tokenizer, pad_token_id=0)[0]
    assert len(theirs) == 1
    assert len(greedy(tiny["model"], prompt, stop=[stop], decode=bpe.decode)) > 1


@pytest.mark.parametrize("temperature", [0.0, 1.5])
def test_a_finished_row_leaves_the_batch_and_the_others_go_on_as_alone(tiny, temperature):
    """Finished rows cost no compute: each step after a row stops runs on the rows still decoding only."""
    model, prompts = tiny["model"], [PROMPT, PROMPT[::-1], [7, 7, 8, 9]]
    alone = [generate(model, torch.tensor([p]), max_new_tokens=NEW, temperature=temperature, seed=3)[0, 4:].tolist()
             for p in prompts]
    stop = alone[1][2]  # the second row stops at its third token; the others (if they never draw it) go on
    sizes: list[int] = []
    hook = model.register_forward_pre_hook(lambda module, args, kwargs: sizes.append(args[0].shape[0]), with_kwargs=True)
    try:
        together = generate(model, torch.tensor(prompts), max_new_tokens=NEW, temperature=temperature, seed=3,
                            stop_ids=[stop])
    finally:
        hook.remove()
    for row, solo in zip(together[:, 4:].tolist(), alone):
        cut = solo.index(stop) + 1 if stop in solo else NEW
        assert row[:cut] == solo[:cut] and set(row[cut:]) <= {stop}
    finished_at = sorted(solo.index(stop) + 1 for solo in alone if stop in solo)
    expected = [len(prompts) - sum(at <= step for at in finished_at) for step in range(len(sizes))]
    assert sizes == expected
    assert temperature or min(sizes) < len(prompts)  # greedy: the second row stops while another goes on
