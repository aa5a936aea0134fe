"""The character tokenizer: a bijection between its characters and 0..V-1, saved as JSON."""

from __future__ import annotations

import json

import pytest
from corpus import SHAKESPEARE_LENGTH, shakespeare_path
from hypothesis import given
from hypothesis import strategies as st

from blockspec.tokenizer import SHAKESPEARE_CHARS, CharTokenizer, TokenizerError


@given(st.text(min_size=1))
def test_encode_then_decode_gives_the_text_back(text):
    tokenizer = CharTokenizer.from_text(text)
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert all(0 <= i < tokenizer.vocab_size for i in ids)
    assert tokenizer.vocab_size == len(set(text))


@given(st.text(min_size=1))
def test_the_same_characters_give_the_same_ids_in_any_order(text):
    assert CharTokenizer.from_text(text) == CharTokenizer.from_text("".join(reversed(text)))


@given(st.text(min_size=1))
def test_a_tokenizer_survives_a_json_round_trip(text):
    tokenizer = CharTokenizer.from_text(text)
    again = CharTokenizer.from_dict(json.loads(json.dumps(tokenizer.to_dict())))
    assert again == tokenizer and again.encode(text) == tokenizer.encode(text)


def test_unknown_characters_and_ids_are_clear_errors():
    tokenizer = CharTokenizer.from_text("abc")
    with pytest.raises(TokenizerError, match=r"character 'z' \(at offset 2\) is not in .* 3 characters"):
        tokenizer.encode("abz")
    with pytest.raises(TokenizerError, match=r"token id 3 is outside .* 0\.\.2"):
        tokenizer.decode([0, 3])
    with pytest.raises(TokenizerError, match="expected a character tokenizer"):
        CharTokenizer.from_dict({"kind": "bpe"})
    with pytest.raises(TokenizerError, match="distinct single characters"):
        CharTokenizer("aba")


def test_the_built_in_shakespeare_vocabulary_is_the_corpus_own():
    assert CharTokenizer.shakespeare().vocab_size == 65
    path = shakespeare_path()
    if path is None:
        pytest.skip("Tiny Shakespeare is not beside the repository (set BLOCKSPEC_DATA)")
    text = path.read_text(encoding="utf-8")
    assert len(text) == SHAKESPEARE_LENGTH
    assert CharTokenizer.from_text(text).chars == SHAKESPEARE_CHARS
