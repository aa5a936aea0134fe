"""A family's config.json is one table: each key read, written and checked from one entry."""

from __future__ import annotations

import pytest

from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.config_table import Table, accepted, fixed, mapped
from blockspec.interop.families import llama_like, mistral, qwen2, qwen3


def names(table: Table) -> list[str]:
    return [key.name for key in table.keys]


def test_but_replaces_a_key_in_place_and_appends_a_new_one_and_without_drops_one():
    base = Table(keys=(accepted("a"), accepted("b")))
    changed = base.but(mapped("a", "model.d_model", int), accepted("c")).without("b")
    assert names(changed) == ["a", "c"] and names(base) == ["a", "b"]
    assert changed.keys[0].write is not base.keys[0].write


def test_a_key_stated_twice_is_refused():
    with pytest.raises(ValueError, match="stated twice"):
        Table(keys=(accepted("a"), accepted("a")))


def test_a_mapped_key_reads_its_older_names_and_writes_every_name():
    key = mapped("n_positions", "model.context_length", int, aliases=("n_ctx",), written_too=("n_ctx",))
    reader, document = ConfigReader({"n_ctx": 64}, "config.json"), {}
    key.read(reader, document, "GPT-2")
    assert document == {"model": {"context_length": 64}} and reader.read == {"n_positions", "n_ctx"}


def test_a_fixed_switch_is_refused_at_its_key_when_set_the_other_way():
    reader = ConfigReader({"add_cross_attention": True}, "config.json")
    fixed("add_cross_attention", False, "cross-attention is not supported").read(reader, {}, "GPT-2")
    assert [str(p) for p in reader.problems] == [
        "config.json: $.add_cross_attention: cross-attention is not supported; expected false"]


def test_what_a_family_expresses_comes_from_its_keys_over_its_table_defaults():
    assert qwen2.TABLE.expresses().biases == "qkv_only" and qwen2.TABLE.expresses().windows == "per_layer"
    assert qwen3.TABLE.expresses().biases == "attention_bias_only" and qwen3.TABLE.expresses().qk_norm == "head"
    assert llama_like.BASE.expresses().windows == "none" and mistral.TABLE.expresses().windows == "all"


def test_mistral_says_only_how_it_differs_from_the_llama_like_base():
    """Every base key is the base's own object; the window keys come after them."""
    assert all(key is base for key, base in zip(mistral.TABLE.keys, llama_like.BASE.keys, strict=False))
    assert names(mistral.TABLE)[len(llama_like.BASE.keys):] == ["sliding_window", "layer_types"]


def test_a_wrongly_typed_activation_is_one_problem_in_every_family_that_shares_the_key():
    """GPT-2, GPT-NeoX and StarCoder2 read their activation through one key: a number there is refused once."""
    from .hf_parity import refused
    from .test_families import EXAMPLES

    for family, key in (("gpt2", "activation_function"), ("gpt_neox", "hidden_act"), ("starcoder2", "hidden_act")):
        assert refused({**EXAMPLES[family], key: 3}).splitlines() == [
            f"config.json: $.{key}: expected str, found int 3"]
