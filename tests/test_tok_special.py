"""`tokenizer train --special`, and the end-of-text token between the files `data prepare` tokenises."""

from __future__ import annotations

import json

import numpy as np
import pytest

from blockspec.cli import main
from blockspec.data.prepared import PreparedDataset
from blockspec.data.tokenizer import read_tokenizer_directory

from .corpus import small_play

tokenizers = pytest.importorskip("tokenizers")


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def train(capsys, tmp_path, *extra: str, vocab: int = 300) -> dict:
    (tmp_path / "play.txt").write_text(small_play(120))
    assert main(["tokenizer", "train", str(tmp_path / "play.txt"), "--vocab-size", str(vocab), "--out",
                 str(tmp_path / "tok"), *extra, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_default_is_one_end_of_text_token_as_gpt2s(tmp_path, capsys):
    summary = train(capsys, tmp_path)
    assert summary["special"] == {"<|endoftext|>": 0} and summary["end_of_text"] == "<|endoftext|>"
    backend = tokenizers.Tokenizer.from_file(str(tmp_path / "tok" / "tokenizer.json"))
    assert backend.get_vocab_size() == 300  # the special token counts in the vocabulary
    assert [(t.content, t.special) for t in backend.get_added_tokens_decoder().values()] == [("<|endoftext|>", True)]
    assert backend.encode("ROMEO:<|endoftext|>JULIET:").tokens.count("<|endoftext|>") == 1  # never split


def test_special_tokens_are_special_to_transformers(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    summary = train(capsys, tmp_path, "--special", "<|bos|>,<|eos|>")
    assert summary["special"] == {"<|bos|>": 0, "<|eos|>": 1} and summary["end_of_text"] == "<|eos|>"
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    assert (auto.bos_token, auto.bos_token_id, auto.eos_token, auto.eos_token_id) == ("<|bos|>", 0, "<|eos|>", 1)
    assert set(auto.all_special_tokens) == {"<|bos|>", "<|eos|>"}
    ids = auto("the lord<|eos|>say")["input_ids"]
    assert 1 in ids and auto.decode(ids, skip_special_tokens=True) == "the lordsay"
    assert read_tokenizer_directory(tmp_path / "tok").encode("<|bos|>") == [0]


def test_the_text_summary_names_each_special_tokens_id(tmp_path, capsys):
    (tmp_path / "play.txt").write_text(small_play(80))
    assert main(["tokenizer", "train", str(tmp_path / "play.txt"), "--vocab-size", "280", "--out",
                 str(tmp_path / "tok"), "--special", "<s>,</s>"]) == 0
    out = capsys.readouterr().out
    assert "<s> = 0" in out and "</s> = 1" in out and "end of text: </s>" in out


@pytest.mark.parametrize("special, expected", [
    ("<a>,<a>", "'<a>' twice"), ("<a>,,<b>", "an empty token"), ("<a>, <b>", "' <b>'")])
def test_bad_special_tokens_get_one_line_naming_the_flag(tmp_path, capsys, special, expected):
    (tmp_path / "play.txt").write_text(small_play(40))
    assert main(["tokenizer", "train", str(tmp_path / "play.txt"), "--vocab-size", "300", "--out",
                 str(tmp_path / "tok"), "--special", special]) == 2
    line = error_line(capsys)
    assert "--special" in line and expected in line and not (tmp_path / "tok").exists()


def test_the_vocabulary_makes_room_for_the_special_tokens(tmp_path, capsys):
    (tmp_path / "play.txt").write_text(small_play(40))
    assert main(["tokenizer", "train", str(tmp_path / "play.txt"), "--vocab-size", "257", "--out",
                 str(tmp_path / "tok"), "--special", "<a>,<b>"]) == 2
    assert "at least 258" in error_line(capsys)


def test_no_special_tokens_when_asked_for_none(tmp_path, capsys):
    summary = train(capsys, tmp_path, "--special", "", vocab=260)
    assert summary["special"] == {} and summary["end_of_text"] is None


def two_files(tmp_path) -> list[str]:
    """Two documents whose boundary, run together, would read as one line: "...lord" + "Sweet ..."."""
    (tmp_path / "one.txt").write_text("ROMEO:\nGood night my lord")  # no line break at its end
    (tmp_path / "two.txt").write_text("Sweet love, what say you?\n")
    return [str(tmp_path / "one.txt"), str(tmp_path / "two.txt")]


def prepared_text(directory) -> tuple[list[int], str]:
    data = PreparedDataset(directory)
    ids = np.concatenate([data.splits["train"], data.splits["val"]]).tolist()
    return ids, data.tokenizer.decode(ids)


def test_prepare_puts_the_end_of_text_token_between_files(tmp_path, capsys):
    train(capsys, tmp_path)
    files = two_files(tmp_path)
    assert main(["data", "prepare", *files, "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "d"),
                 "--quiet", "--json"]) == 0
    meta = json.loads(capsys.readouterr().out)
    ids, text = prepared_text(tmp_path / "d")
    assert text == "ROMEO:\nGood night my lord<|endoftext|>Sweet love, what say you?\n"
    assert ids.count(0) == 1 and meta["separator"] == "<|endoftext|>"


def test_prepare_without_an_end_of_text_token_ends_each_file_with_a_line_break(tmp_path, capsys):
    files = two_files(tmp_path)
    (tmp_path / "three.txt").write_text("Hence!")
    assert main(["data", "prepare", *files, str(tmp_path / "three.txt"), "--tokenizer", "char", "--out",
                 str(tmp_path / "d"), "--quiet"]) == 0
    _, text = prepared_text(tmp_path / "d")
    assert text == "ROMEO:\nGood night my lord\nSweet love, what say you?\nHence!"  # two.txt ends in one already
    assert json.loads((tmp_path / "d" / "meta.json").read_text())["separator"] == "\n"


def test_a_single_file_is_prepared_as_it_is(tmp_path, capsys):
    train(capsys, tmp_path)
    one = two_files(tmp_path)[0]
    assert main(["data", "prepare", one, "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "d"),
                 "--quiet"]) == 0
    assert prepared_text(tmp_path / "d")[1] == "ROMEO:\nGood night my lord"


def test_bpe_training_merges_nothing_across_two_files(tmp_path, capsys):
    """Each file is its own document to the trainer too: "zq" never meets "qz" across the boundary."""
    (tmp_path / "a.txt").write_text("xzq " * 200 + "xzq")
    (tmp_path / "b.txt").write_text("qzy " * 200)
    assert main(["tokenizer", "train", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "--vocab-size", "400",
                 "--out", str(tmp_path / "tok")]) == 0
    vocab = tokenizers.Tokenizer.from_file(str(tmp_path / "tok" / "tokenizer.json")).get_vocab()
    assert "xzqqzy" not in vocab and "zqqz" not in vocab and "qq" not in vocab


def test_a_character_vocabulary_without_a_line_break_cannot_separate_files(tmp_path):
    from blockspec.data.prepared import prepare
    from blockspec.data.tokenizer import CharTokenizer, TokenizerError

    (tmp_path / "x.txt").write_text("abc")
    (tmp_path / "y.txt").write_text("cab")
    with pytest.raises(TokenizerError, match=r"x.txt: does not end with a line break, and characters \(3\) "
                                             r"hold none to put between it and the next file"):
        prepare([tmp_path / "x.txt", tmp_path / "y.txt"], CharTokenizer("abc"), tmp_path / "d")
    assert not (tmp_path / "d").exists()
