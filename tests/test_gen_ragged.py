"""Ragged batches: left-padded prompts of different lengths, each row the same as that prompt alone.

The cache carries each row's padding (``KVCache(padding=...)``): the encoders see each row's own
positions, and attention hides the padding keys. Every positional kind is covered, the third-party
fallback (an encoder whose hooks take int starts only) included, with a sliding window and a MoE FFN.
"""

from __future__ import annotations

import re

import pytest
import torch
from attrs import frozen
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tomli_w import dumps

import blockspec
from blockspec.generation.processors import TokenCounts
from blockspec.generation.tokens import generate
from blockspec.modules.kv_cache import KVCache
from blockspec.plugin import PositionalEncoding


pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

VOCAB = 29


@frozen(kw_only=True)
class RowwiseConfig:
    """A third party's encoder that adds, rotates and biases, with int starts only."""


class RowwisePositions(PositionalEncoding):
    """No ``tensor_positions``: the core calls its hooks row by row. Its bias reads absolute key positions,
    so a wrong start changes the scores."""

    adds = rotates = biases = True

    def __init__(self, d_model: int, head_dim: int) -> None:
        super().__init__(max_positions=None)
        self.d_model, self.head_dim = d_model, head_dim

    def embed(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        assert isinstance(start, int) and start >= 0
        at = torch.arange(start, start + x.shape[-2], dtype=torch.float32)
        return x + 0.3 * torch.sin(at[:, None] * torch.linspace(0.1, 1.0, self.d_model))  # (B, N, d) + (N, d)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        assert isinstance(start, int) and start >= 0
        angle = torch.arange(start, start + q.shape[-2], dtype=torch.float32)[:, None] * 0.7  # (N, 1)
        return _turned(q, angle), _turned(k, angle)

    def score_bias(self, n_q: int, n_k: int, start: int = 0) -> torch.Tensor:
        assert isinstance(start, int) and start >= 0
        keys = torch.arange(start + n_q - n_k, start + n_q, dtype=torch.float32)  # (n_k,)
        return (-0.2 * keys).expand(1, n_q, n_k)  # (1, n_q, n_k)


def _turned(x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """x (..., N, hs): the first two features turned by angle (N, 1)."""
    a, b, rest = x[..., :1], x[..., 1:2], x[..., 2:]
    cos, sin = angle.cos(), angle.sin()
    return torch.cat((a * cos - b * sin, a * sin + b * cos, rest), dim=-1)  # (..., N, hs)


def _plugin():
    import types

    plugin = types.ModuleType("test_ragged_plugin")

    @blockspec.hookimpl
    def blockspec_register(register):
        register("positional", "rowwise", RowwiseConfig,
                 lambda c, ctx: RowwisePositions(ctx.model.d_model, ctx.model.head_dim))

    plugin.blockspec_register = blockspec_register
    return plugin


@pytest.fixture(scope="module")
def ragged_registry():
    return blockspec.load_registry(plugins=[(_plugin(), "test-ragged", "0.0")])


KINDS: dict[str, dict] = {  # name -> the spec's tables beyond [model]
    "learned": {"positional": {"use": "learned"}},
    "sinusoidal": {"positional": {"use": "sinusoidal"}},
    "rope": {"positional": {"use": "rope"}},
    "rope-llama3": {"positional": {"use": "rope", "scaling": "llama3", "factor": 4.0, "original_context_length": 4}},
    "rope-dynamic": {"positional": {"use": "rope", "scaling": "dynamic", "factor": 2.0}, "context_length": 6},
    "alibi": {"positional": {"use": "alibi"}},  # the example third-party plugin: a score bias
    "rowwise": {"positional": {"use": "rowwise"}},  # no tensor_positions: the row-by-row fallback
    "window": {"positional": {"use": "rope"}, "attention": {"use": "causal", "sliding_window": 3}},
    "softcap": {"positional": {"use": "alibi"}, "attention": {"use": "causal", "logit_softcap": 2.0}},
    "sinks": {"positional": {"use": "alibi"}, "attention": {"use": "causal", "sinks": True}},
    "moe": {"positional": {"use": "rope"}, "ffn": {"use": "moe", "n_experts": 4, "top_k": 2}},
    "parallel": {"positional": {"use": "sinusoidal"}, "block": {"use": "parallel"}},  # a plugin's block, unchanged
}


def kind_spec(name: str, registry) -> blockspec.ModelSpec | None:
    """The tiny spec of one kind, or None when one of its components is not installed."""
    tables = dict(KINDS[name])
    model = {"name": f"ragged-{name}", "vocab_size": VOCAB, "context_length": tables.pop("context_length", 24),
             "d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "d_ff": 48}
    if any(registry.get(kind, table["use"]) is None for kind, table in tables.items() if kind != "attention"):
        return None  # a component not installed
    document = {"model": model, "norm": {"use": "layernorm"}, "activation": {"use": "gelu"},
                "head": {"use": "lm"}, **tables}
    return blockspec.loads_spec(dumps(document), registry)


@pytest.fixture(scope="module")
def models(ragged_registry):
    """One tiny model of each kind, built once; the embedding sharpened so greedy ties cannot flip."""
    built = {}
    for name in KINDS:
        spec = kind_spec(name, ragged_registry)
        if spec is None:
            continue
        model = blockspec.build(spec, registry=ragged_registry, seed=0)
        with torch.no_grad():
            model.embedding.weight.mul_(25.0)
        built[name] = model.eval()
    return built


def left_padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts -> ids (B, L) left-padded with id 0, and each row's padding (B,)."""
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    return ids, torch.tensor([width - len(p) for p in prompts])


prompt_lists = st.lists(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=7), min_size=1, max_size=4)


@pytest.mark.parametrize("kind", list(KINDS))
@settings(max_examples=8)
@given(prompts=prompt_lists, steps=st.integers(1, 3))
def test_a_padded_cache_gives_each_row_its_solo_logits(models, kind, prompts, steps):
    model = models.get(kind) or pytest.skip(f"{kind}: component not installed")
    ids, padding = left_padded(prompts)
    following = torch.randint(VOCAB, (len(prompts), steps), generator=torch.Generator().manual_seed(len(prompts)))
    with torch.no_grad():
        cache = KVCache.for_model(model, batch_size=len(prompts), max_length=ids.shape[1] + steps, padding=padding)
        batched = [model(ids, cache=cache)]
        for t in range(steps):
            batched.append(model(following[:, t:t + 1], start=ids.shape[1] + t, cache=cache))
        together = torch.cat(batched, dim=1)  # (B, L + steps, |V|)
        for row, prompt in enumerate(prompts):
            alone = solo_logits(model, prompt, following[row])  # (N + steps, |V|)
            torch.testing.assert_close(together[row, padding[row]:], alone, rtol=1e-4, atol=1e-4)


def solo_logits(model, prompt: list[int], following: torch.Tensor) -> torch.Tensor:
    """One prompt alone through a cache, then ``following`` (steps,) one token a call: (N + steps, |V|).

    The same calls as the batch's, so dynamic RoPE (whose frequencies follow each call's end) agrees too."""
    cache = KVCache.for_model(model, batch_size=1, max_length=len(prompt) + len(following))
    logits = [model(torch.tensor([prompt]), cache=cache)]
    for t, token in enumerate(following.tolist()):
        logits.append(model(torch.tensor([[token]]), start=len(prompt) + t, cache=cache))
    return torch.cat(logits, dim=1)[0]  # (N + steps, |V|)


def test_an_unpadded_cache_has_no_mask(models):
    model = models["rope"]
    cache = KVCache.for_model(model, batch_size=2, max_length=4, padding=torch.zeros(2, dtype=torch.long))
    assert cache.padding is None and cache.layers[0].key_mask(0, 4) is None and cache.positions(3) == 3


def test_a_padding_query_sees_itself_only_and_real_queries_skip_padding():
    cache = KVCache(n_layers=1, batch_size=2, n_kv_heads=1, head_dim=2, max_length=4, padding=torch.tensor([2, 0]))
    mask = cache.layers[0].key_mask(0, 4)[:, 0]  # (B, N_q, N_k)
    assert mask[0].tolist() == [[True, False, True, True], [False, True, True, True],
                                [False, False, True, True], [False, False, True, True]]
    assert mask[1].all()
    assert cache.positions(3).tolist() == [[1], [3]]


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_0d_tensor_start_is_the_int_start(models, kind):
    """A compiled decode step passes its position as a 0-d tensor (no recompiling per position): same logits."""
    model = models.get(kind) or pytest.skip(f"{kind}: component not installed")
    ids = torch.randint(VOCAB, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        by_int, by_tensor = (KVCache.for_model(model, batch_size=2, max_length=9) for _ in range(2))
        model(ids[:, :7], cache=by_int), model(ids[:, :7], cache=by_tensor)
        for start in (7, 8):
            expected = model(ids[:, start:start + 1], start=start, cache=by_int)
            found = model(ids[:, start:start + 1], start=torch.tensor(start), cache=by_tensor)
            torch.testing.assert_close(found, expected, rtol=1e-5, atol=1e-5)


# -- generation ---------------------------------------------------------------------------------------

SAMPLING = [dict(temperature=0.0), dict(temperature=8.0, top_k=8, seed=11),
            dict(temperature=6.0, top_p=0.95, repetition_penalty=1.3, seed=5)]


def solo_tokens(model, prompts: list[list[int]], new_tokens: int, **sampling) -> list[list[int]]:
    """Each prompt generated alone, with the same seed: a row's draws do not depend on the rows beside it."""
    return [generate(model, torch.tensor([prompt]), max_new_tokens=new_tokens, **sampling)[0].tolist()
            for prompt in prompts]


@pytest.mark.parametrize("kind", list(KINDS))
@settings(max_examples=4)
@given(prompts=prompt_lists, sampling=st.sampled_from(SAMPLING), new_tokens=st.integers(1, 5))
@example(prompts=[[1, 2], [3, 4, 5, 6], [7]], sampling=SAMPLING[1], new_tokens=4)
def test_each_row_of_a_ragged_batch_is_its_prompt_alone(models, kind, prompts, sampling, new_tokens):
    model = models.get(kind) or pytest.skip(f"{kind}: component not installed")
    together = generate(model, prompts, max_new_tokens=new_tokens, **sampling)
    assert [row.tolist() for row in together] == solo_tokens(model, prompts, new_tokens, **sampling)


@pytest.mark.parametrize("case", ["uncached", "sliding"])
@settings(max_examples=4)
@given(prompts=prompt_lists, sampling=st.sampled_from(SAMPLING))
@example(prompts=[[1, 2], [3, 4, 5], [6, 7, 8], [9]], sampling=SAMPLING[1])
def test_where_no_cache_serves_runs_of_equal_length_give_the_same_tokens(models, case, prompts, sampling):
    """use_cache=False, or learned positions the longest row slides past (context 24): grouped, same tokens."""
    new_tokens = 3 if case == "uncached" else 20
    options = dict(use_cache=case == "sliding", **sampling)
    together = generate(models["learned"], prompts, max_new_tokens=new_tokens, **options)
    assert [row.tolist() for row in together] == solo_tokens(models["learned"], prompts, new_tokens, **options)


@pytest.mark.parametrize("use_cache", [True, False])  # False: runs of one length, interleaved
def test_a_ragged_stream_stops_each_row_as_alone(models, use_cache):
    model, prompts = models["rope"], [[3, 1, 4, 1, 5], [9], [2, 6]]
    alone = solo_tokens(model, prompts, 8, temperature=0.0)
    stop = alone[1][2]  # the second row's first new token stops it at once
    pad = min(set(range(VOCAB)) - {t for row in alone for t in row})  # never drawn: the first stop id pads
    stops = dict(stop_ids=[pad, stop], temperature=0.0, max_new_tokens=8)
    together = generate(model, prompts, use_cache=use_cache, **stops)
    for row, prompt in zip(together, prompts):
        new = row[len(prompt):].tolist()
        solo = generate(model, torch.tensor([prompt]), **stops)[0]
        assert new[:len(solo) - len(prompt)] == solo[len(prompt):].tolist()
        assert set(new[len(solo) - len(prompt):]) <= {pad}  # a finished row repeats the first stop id


@pytest.mark.parametrize("bad, found", [([], "[]"), ([[1, 2], []], "no tokens"), ([[1, 2.5]], "[1, 2.5]"),
                                        ([torch.zeros(2, 2, dtype=torch.long)], "shape (2, 2)")])
def test_bad_prompt_lists_are_one_line_input_errors(models, bad, found):
    with pytest.raises(blockspec.errors.InputError, match=re.escape(found)) as caught:
        generate(models["rope"], bad, max_new_tokens=2)
    assert "\n" not in str(caught.value)


def test_the_penalties_do_not_count_padding_as_prompt():
    ids, padding = left_padded([[3, 4], [5, 6, 7]])  # row 0 is padded with id 0, which it never saw
    seen = TokenCounts.start(ids, 8, padding=padding).seen()
    assert seen[0].nonzero().flatten().tolist() == [3, 4] and seen[1].nonzero().flatten().tolist() == [5, 6, 7]


def test_the_largest_seed_still_seeds_every_sample(models):
    """Sample i draws with seed + i, wrapped past 2**64 - 1: the largest seed a solo run takes serves samples too."""
    prompts = [[1, 2], [3, 4, 5]]
    together = generate(models["rope"], prompts, max_new_tokens=3, temperature=8.0, seed=2**64 - 1, num_samples=2)
    alone = [generate(models["rope"], torch.tensor([p]), max_new_tokens=3, temperature=8.0, seed=s)[0].tolist()
             for p in prompts for s in (2**64 - 1, 0)]
    assert [row.tolist() for row in together] == alone
