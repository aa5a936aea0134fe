"""Bits per byte: the arithmetic every such figure shares (data/measure.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from blockspec.data.measure import TextSize, bits_per_byte, bits_per_character, decoded_size, text_size
from blockspec.data.tokenizer import CharTokenizer


def test_a_character_models_bits_per_byte_is_its_loss_in_bits_times_tokens_per_byte():
    text = "héllo wörld\n" * 3  # two-byte characters: bytes > characters
    tokenizer = CharTokenizer.from_text(text)
    ids = tokenizer.encode(text)
    loss = 1.7  # nats per token
    size = decoded_size(tokenizer, ids)
    assert size == TextSize(bytes=len(text.encode()), characters=len(text))
    assert bits_per_byte(loss * len(ids), size) == pytest.approx(loss / math.log(2) * len(ids) / size.bytes)
    assert bits_per_character(loss * len(ids), size) == pytest.approx(loss / math.log(2))


@given(st.text(min_size=1))
def test_bytes_are_utf8_bytes_and_characters_code_points(text):
    size = text_size(text)
    assert size.bytes == len(text.encode("utf-8")) >= size.characters == len(text)
