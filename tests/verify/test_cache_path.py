"""The cache path as a property: the four cache bugs the kit used to pass are caught, with the property that
names them, and every first-party and blockspec-extras component passes.

The bugs (tests/verify/broken/, distribution broken-dist): a T5 bias that assumes as many queries as keys,
sinusoidal positions whose embed ignores ``start``, a RoPE table computed for start + 1 past the context,
and an attention that drops its mask whenever a cache is passed; for ragged (left-padded) batches, an
attention that sees the padding keys and one that turns q and k at the slot, not the row's position.
"""

from __future__ import annotations

import json

import attrs
import pytest
import torch
from hypothesis import find as find_example

import blockspec
from blockspec.cli import main, verify_cmd
from blockspec.registry.components import Component
from blockspec.testing import check
from blockspec.testing.cache_cases import CacheCase, fitted
from blockspec.testing.cache_strategies import cache_cases
from blockspec.testing.properties import Property, find, properties_for
from blockspec.testing.properties.cache import ReferenceEncoder, full_bias
from blockspec.testing.reference import ReferenceConfig
from blockspec.spec.schema import ModelConfig
from tests.verify.broken import DISTRIBUTION, VERSION
from tests.verify.conftest import broken_module

MAX_EXAMPLES = 25
CACHE_BUGS = ("square_t5_bias", "startless_sinusoidal", "shifted_rope", "maskless_cache_attention",
              "padding_blind_attention")
CACHE_PROPERTIES = ("cache_positions", "cache_attention", "cache_padding", "model_cache")

CAUGHT = [  # component, the cache property that must fail, what the message must say
    ("positional:square_t5_bias", "cache_positions", "score_bias(1, "),
    ("positional:square_t5_bias", "model_cache", "through a KVCache"),
    ("positional:startless_sinusoidal", "cache_positions", "embed(x, start="),
    ("positional:startless_sinusoidal", "model_cache", "through a KVCache"),
    ("positional:shifted_rope", "cache_positions", "rotate(q, k, start="),
    ("positional:shifted_rope", "model_cache", "through a KVCache"),
    ("attention:maskless_cache", "cache_attention", "through a LayerCache"),
    ("attention:maskless_cache", "model_cache", "through a KVCache"),
    ("attention:padding_blind", "cache_padding", "through a LayerCache with padding"),  # a ragged batch
    ("attention:slot_positions", "cache_padding", "through a LayerCache with padding"),
]
PASSED_BEFORE = [  # each bug keeps every promise the kit checked before the cache path: only it catches them
    ("positional:square_t5_bias", ("contract", "relative", "context_limit", "model_causal")),
    ("positional:startless_sinusoidal", ("contract", "relative", "context_limit", "model_causal")),
    ("positional:shifted_rope", ("contract", "relative", "rotation_norms", "context_limit", "model_causal")),
    ("attention:maskless_cache", ("contract", "causal", "weights", "model_causal")),
    ("attention:padding_blind", ("contract", "causal", "weights", "cache_attention", "model_cache")),
    ("attention:slot_positions", ("contract", "causal", "weights", "cache_attention", "model_cache")),
]
FIRST_PARTY = ("blockspec", "blockspec-positional", "blockspec-blocks", "blockspec-extras")


@pytest.fixture(scope="module")
def cache_bugs() -> blockspec.Registry:
    return blockspec.load_registry(plugins=[(broken_module(name), DISTRIBUTION, VERSION) for name in CACHE_BUGS])


def _component(registry: blockspec.Registry, qualified: str) -> Component:
    kind, name = qualified.split(":")
    return registry.get(kind, name, DISTRIBUTION)


@pytest.mark.parametrize(("qualified", "prop", "said"), CAUGHT)
def test_each_cache_bug_is_caught_by_the_cache_property(cache_bugs, qualified, prop, said):
    component = _component(cache_bugs, qualified)
    result = check(component, find(prop, component.kind), max_examples=MAX_EXAMPLES)
    assert result.status == "failed"
    assert f"{qualified} (from broken-dist 0.0) fails {prop}" in result.message
    assert said in result.message
    assert isinstance(result.example, CacheCase)
    assert json.loads(json.dumps(result.as_dict()))["example"]["chunks"] == list(result.example.chunks)


@pytest.mark.parametrize(("qualified", "kept"), PASSED_BEFORE)
def test_the_other_properties_pass_each_cache_bug(cache_bugs, qualified, kept):
    component = _component(cache_bugs, qualified)
    for prop in kept:
        assert check(component, find(prop, component.kind), max_examples=10).status == "passed", prop


def _first_party(registry: blockspec.Registry) -> list[tuple[Component, Property]]:
    return [(c, p) for c in registry if c.distribution in FIRST_PARTY for p in properties_for(c.kind)
            if p.name in CACHE_PROPERTIES and p.applies(c)]


def test_every_first_party_and_extras_component_passes_the_cache_path(registry):
    pairs = _first_party(registry)
    assert {c.name for c, _ in pairs} >= {"causal", "learned", "sinusoidal", "rope", "alibi", "pre", "rezero"}
    results = [check(component, prop, max_examples=MAX_EXAMPLES) for component, prop in pairs]
    failed = [r.message for r in results if r.status != "passed"]
    assert failed == []


def _reference_component(**flags: bool) -> Component:
    promises = {"unbounded"} | {p for p, flag in (("rotary", "rotates"), ("score_bias", "biases")) if flags[flag]}
    return Component(kind="positional", name="reference_encoder", config_cls=ReferenceConfig,
                     build=lambda config, ctx: ReferenceEncoder(ctx.model.n_heads, dtype=torch.float32, **flags),
                     distribution="tests", version="0", summary="", promises=frozenset(promises | {"relative"}))


@pytest.mark.parametrize("flags", [dict(rotates=True, biases=False), dict(rotates=False, biases=True),
                                   dict(rotates=True, biases=True)])
def test_the_reference_encoders_keep_the_documented_contract(flags):
    """The encoders an attention component is decoded with keep the contract they stand for."""
    component = _reference_component(**flags)
    for prop in ("contract", "cache_positions"):
        assert check(component, find(prop, "positional"), max_examples=MAX_EXAMPLES).status == "passed", prop


def test_score_bias_with_fewer_queries_is_the_last_rows_of_the_square_ending_at_the_same_key(registry):
    """The documented meaning: queries at start..start+n_q-1, keys ending where they end (alibi, first-party)."""
    alibi = registry.get("positional", "alibi").build(None, _context(n_heads=2))
    square = alibi.score_bias(7, 7, 0)  # positions 0..6
    assert torch.equal(alibi.score_bias(2, 7, 5), square[:, 5:7, :])  # with a cache: keys 0..6
    assert torch.equal(alibi.score_bias(2, 2, 5), square[:, 5:7, 5:7])  # without: keys 5..6


def _context(**sizes: int):
    from blockspec.assembly.context import BuildContext

    model = ModelConfig(name="t", vocab_size=11, context_length=4, d_model=8, n_layers=1, n_heads=2, d_ff=8)
    return BuildContext(model=attrs.evolve(model, **sizes), embedding=torch.nn.Embedding(11, 8))


def test_a_bias_that_cannot_broadcast_to_the_scores_is_named():
    with pytest.raises(AssertionError, match=r"score_bias\(1, 5, 4\) has shape \(2, 5, 5\), which does not "
                                             r"broadcast to the scores of 1 queries and 5 keys \(2, 1, 5\)"):
        full_bias(torch.zeros(2, 5, 5), 2, 1, 5, "score_bias(1, 5, 4)")


def test_calls_are_the_prefix_then_each_chunk_and_a_bounded_table_cuts_them():
    case = CacheCase(model=_context().model, config=None, start=3, tokens=6, chunks=(1, 2, 3))
    assert list(case.calls()) == [(0, 3), (3, 4), (4, 6), (6, 9)]
    assert list(attrs.evolve(case, start=0).calls()) == [(0, 1), (1, 3), (3, 6)]
    cut = fitted(case, 5)
    assert (cut.start, cut.chunks, cut.tokens, cut.length) == (0, (1, 2, 2), 5, 5)
    assert fitted(case, 9) is case


@pytest.mark.parametrize("where", ["inside", "crossing", "far"])
def test_the_cases_reach_past_the_context_and_far_past_it(where):
    component = _reference_component(rotates=True, biases=False)
    wanted = {
        "inside": lambda c: c.length <= c.model.context_length and len(c.chunks) > 1,
        "crossing": lambda c: 0 < c.start <= c.model.context_length < c.length,
        "far": lambda c: c.start > 4 * c.model.context_length + 8 and c.start > 500,
    }[where]
    assert wanted(find_example(cache_cases(component), wanted))


def test_blockspec_verify_names_the_cache_property(cache_bugs, monkeypatch, capsys):
    monkeypatch.setattr(verify_cmd, "registry_with_warnings", lambda: cache_bugs)
    code = main(["verify", "--component", "positional:shifted_rope", "--max-examples", "10"])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL positional:shifted_rope (from broken-dist 0.0) fails cache_positions:" in out
    assert "chunks=" in out  # the falsifying example says how positions were fed
