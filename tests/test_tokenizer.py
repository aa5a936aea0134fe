"""The character tokenizer, the byte fallback, and token-id parsing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockspec.data.tokenizer import (
    TINY_SHAKESPEARE_CHARS,
    ByteTokenizer,
    CharTokenizer,
    TokenizerError,
    parse_ids,
    stand_in_tokenizer,
)


def test_default_is_the_65_sorted_tiny_shakespeare_characters():
    tokenizer = CharTokenizer.default()
    assert tokenizer.vocab_size == 65
    assert tokenizer.chars == "".join(sorted(set(TINY_SHAKESPEARE_CHARS)))
    assert tokenizer.encode("\n !") == [0, 1, 2]
    assert tokenizer.encode("To be") == [32, 53, 1, 40, 43]


def test_from_text_is_the_sorted_set_of_characters():
    tokenizer = CharTokenizer.from_text("hello world")
    assert tokenizer.chars == " dehlorw"
    assert tokenizer.decode(tokenizer.encode("hello")) == "hello"


@given(st.text(alphabet=TINY_SHAKESPEARE_CHARS))
def test_encode_decode_round_trip(text):
    tokenizer = CharTokenizer.default()
    ids = tokenizer.encode(text)
    assert len(ids) == len(text) and all(0 <= i < 65 for i in ids)
    assert tokenizer.decode(ids) == text


def test_dict_round_trip_and_bad_dicts():
    tokenizer = CharTokenizer.from_text("abc")
    assert CharTokenizer.from_dict(tokenizer.to_dict()) == tokenizer
    with pytest.raises(TokenizerError, match="expected"):
        CharTokenizer.from_dict({"type": "bpe"})
    with pytest.raises(TokenizerError, match="distinct"):
        CharTokenizer("abca")


def test_unknown_character_is_named_with_the_vocabulary():
    with pytest.raises(TokenizerError, match=r"character '#' at position 2 .* vocabulary; use only"):
        CharTokenizer.default().encode("ab#")
    with pytest.raises(TokenizerError, match="outside the vocabulary 0..64"):
        CharTokenizer.default().decode([65])


def test_stand_in_tokenizer_for_a_vocabulary():
    assert stand_in_tokenizer(65) == CharTokenizer.default()
    assert isinstance(stand_in_tokenizer(50257), ByteTokenizer)
    assert stand_in_tokenizer(32000).encode("é") == [195, 169]
    with pytest.raises(TokenizerError, match="vocab_size 100 .* give token ids instead of text"):
        stand_in_tokenizer(100)


def test_parse_ids():
    assert parse_ids("1, 2,3", 10) == [1, 2, 3]
    with pytest.raises(TokenizerError, match="outside the vocabulary 0..9"):
        parse_ids("1,10", 10)
    with pytest.raises(TokenizerError, match="expected an integer token id, found 'x'"):
        parse_ids("1,x", 10)
    with pytest.raises(TokenizerError, match="found nothing"):
        parse_ids(" , ", 10)
