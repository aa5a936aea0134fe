"""Issue 25, streaming: text per row as it is generated, in whole UTF-8 characters, joining to the final text."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import blockspec
from blockspec.data.tokenizer import train_bpe
from blockspec.generation.streaming import REPLACEMENT, TextStream
from blockspec.generation.tokens import generate, generate_stream

from .corpus import small_play
from .test_gen_stops import NEW, PROMPT, make_tiny, run

pytest.importorskip("tokenizers")
pytestmark = pytest.mark.usefixtures("one_thread")

BPE = train_bpe(iter([small_play(60)]), 280)  # learnt on ASCII: other characters go byte by byte
MULTI_BYTE = st.text(st.sampled_from("aé€𝄞 ;\nж中"), min_size=1, max_size=30)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, registry):
    return make_tiny(tmp_path_factory.mktemp("stream"), registry)


@given(MULTI_BYTE, st.integers(1, 3))
@settings(max_examples=60, deadline=None)
def test_streamed_pieces_join_to_the_text_and_never_split_a_character(text, rows):
    ids = BPE.encode(text)
    stream = TextStream(rows, BPE.decode)
    pieces = [stream.push([token] * rows) for token in ids] + [stream.flush()]
    for row in range(rows):
        row_pieces = [step[row] for step in pieces]
        assert "".join(row_pieces) == text
        assert not any(REPLACEMENT in piece for piece in row_pieces)


def test_a_character_waits_for_its_last_byte():
    euro = BPE.encode("€")  # three bytes, three tokens
    stream = TextStream(1, BPE.decode)
    assert len(euro) == 3 and [stream.push([token])[0] for token in euro] == ["", "", "€"]


def test_an_incomplete_tail_at_the_end_comes_out_as_the_text_has_it():
    stream = TextStream(1, BPE.decode)
    cut = BPE.encode("a€")[:-1]  # the euro's last byte never comes
    pieces = [stream.push([token])[0] for token in cut] + stream.flush()
    assert "".join(pieces) == BPE.decode(cut) and pieces[-1].endswith(REPLACEMENT)


def test_generate_is_its_stream_joined(tiny):
    ids = torch.tensor([PROMPT, PROMPT[::-1]])  # (2, N)
    steps = list(generate_stream(tiny["model"], ids, max_new_tokens=6, temperature=1.0, seed=4))
    assert len(steps) == 6 and all(step.shape == (2,) for step in steps)
    joined = torch.cat((ids, torch.stack(steps, dim=1)), dim=1)  # (2, N) + (2, 6) -> (2, N + 6)
    assert torch.equal(joined, generate(tiny["model"], ids, max_new_tokens=6, temperature=1.0, seed=4))


def test_a_stream_is_checked_before_its_first_step(tiny):
    with pytest.raises(blockspec.InputError, match="max_new_tokens"):
        generate_stream(tiny["model"], torch.tensor([PROMPT]), max_new_tokens=-1)


def test_the_library_stream_joins_to_generates_text(tiny):
    model, bpe = tiny["model"], tiny["bpe"]
    whole = blockspec.generate(model, "the", tokenizer=bpe, max_new_tokens=NEW, seed=2)
    pieces = list(blockspec.stream(model, "the", tokenizer=bpe, max_new_tokens=NEW, seed=2))
    assert len(pieces) > 1 and "the" + "".join(pieces) == whole.text


def test_the_command_streams_the_same_text_and_json_lines(tiny, capsys):
    ckpt, flags = tiny["root"] / "ckpt", ["--prompt", "the", "--max-new-tokens", NEW]
    code, plain, _ = run(capsys, "generate", ckpt, *flags)
    code, streamed, _ = run(capsys, "generate", ckpt, *flags, "--stream")
    assert code == 0 and streamed == plain[len("the"):]
    code, lines, _ = run(capsys, "generate", ckpt, *flags, "--stream", "--json")
    objects = [json.loads(line) for line in lines.splitlines()]
    *pieces, final = objects
    assert code == 0 and all(set(piece) == {"piece"} for piece in pieces)
    assert final["text"] == "the" + "".join(piece["piece"] for piece in pieces) and final["stop_reason"] == "length"


def test_stream_takes_one_prompt(tiny, capsys):
    code, _, err = run(capsys, "generate", tiny["root"] / "ckpt", "--prompt", "a", "--prompt", "b", "--stream")
    assert code == 2 and "--stream: streams one prompt" in err and len(err.strip().splitlines()) == 1
