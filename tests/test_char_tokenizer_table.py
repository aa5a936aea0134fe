"""CharTokenizer's table lookup: the ids, and the refusals, a dict per character gives, for any characters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockspec.data.tokenizer import CharTokenizer, TokenizerError

ANY_CHAR = st.characters(codec=None, exclude_categories=())  # astral characters and lone surrogates too


def reference(chars: str, text: str) -> list[int] | int:
    """The ids by a dict, or the position of the first character outside ``chars``."""
    index = {c: i for i, c in enumerate(chars)}
    for position, char in enumerate(text):
        if char not in index:
            return position
    return [index[c] for c in text]


@settings(max_examples=200, deadline=None)
@given(chars=st.lists(ANY_CHAR, min_size=1, max_size=12, unique=True).map("".join), data=st.data())
def test_encode_gives_the_dicts_ids_or_refuses_the_first_unknown_character(chars, data):
    text = data.draw(st.text(st.sampled_from(chars) | ANY_CHAR, max_size=30))
    tokenizer, expected = CharTokenizer(chars), reference(chars, text)
    if isinstance(expected, int):
        with pytest.raises(TokenizerError, match=f"at position {expected} is not in"):
            tokenizer.encode(text)
    else:
        assert tokenizer.encode(text) == expected and all(type(i) is int for i in expected)
        assert tokenizer.decode(expected) == text


def test_decode_refuses_the_first_id_outside_the_vocabulary():
    tokenizer = CharTokenizer("abc")
    assert tokenizer.decode([2, 0, 1]) == "cab" and tokenizer.decode([]) == "" and tokenizer.encode("") == []
    for ids, bad in [([0, 3, -1], 3), ([1, -1, 5], -1)]:
        with pytest.raises(TokenizerError, match=f"token id {bad} is outside the vocabulary 0..2"):
            tokenizer.decode(ids)
