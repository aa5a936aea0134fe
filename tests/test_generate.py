"""KV-cache decoding: the cache changes the work done, never the logits or the greedy tokens."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import blockspec
from blockspec.generation.tokens import generate, sample
from blockspec.modules.kv_cache import KVCache

from .specs import spec_text

EXAMPLE_SPEC = Path(__file__).resolve().parents[1] / "examples" / "specs" / "tiny-shakespeare.toml"  # learned, 64

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest


POSITIONALS = ("learned", "sinusoidal", "rope", "alibi")  # alibi: the example third-party plugin, a score bias


def small_model(registry, positional: str, *, kv: int = 4, placement: str = "pre", seed: int = 0):
    if registry.get("positional", positional) is None:
        pytest.skip(f"no {positional!r} positional component installed")
    text = spec_text(name=f"small-{positional}", vocab_size=29, context_length=16, d_model=32, n_layers=2, n_heads=4,
                     n_kv_heads=kv, d_ff=48, norm_placement=placement, positional=positional)
    spec = blockspec.loads_spec(text, registry)
    model = blockspec.build(spec, registry=registry, seed=seed)
    _sharpen(model)
    return model.eval()


def _sharpen(model: torch.nn.Module) -> None:
    """Scale the embedding up so random-init logits are far apart: greedy ties cannot flip on rounding."""
    with torch.no_grad():
        model.embedding.weight.mul_(25.0)


@pytest.mark.parametrize("positional", POSITIONALS)
def test_cached_and_uncached_greedy_generation_are_identical(registry, positional):
    model = small_model(registry, positional)
    prompt = torch.randint(0, 29, (3, 5), generator=torch.Generator().manual_seed(1))
    cached = generate(model, prompt, max_new_tokens=11, temperature=0.0, use_cache=True)
    uncached = generate(model, prompt, max_new_tokens=11, temperature=0.0, use_cache=False)
    assert cached.shape == (3, 16)
    assert torch.equal(cached[:, :5], prompt)
    assert torch.equal(cached, uncached)


@pytest.mark.parametrize("positional", POSITIONALS)
@pytest.mark.parametrize("kv,placement", [(4, "pre"), (2, "pre"), (1, "post")])
def test_cached_logits_match_a_full_forward(registry, positional, kv, placement):
    """Prefix, then a multi-token chunk, then single tokens: each equals the full pass's rows."""
    model = small_model(registry, positional, kv=kv, placement=placement)
    ids = torch.randint(0, 29, (2, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(ids)  # (B, 16, |V|)
        cache = KVCache.for_model(model, batch_size=2, max_length=16)
        pieces = [model(ids[:, :6], cache=cache), model(ids[:, 6:11], start=6, cache=cache)]
        pieces += [model(ids[:, t : t + 1], start=t, cache=cache) for t in range(11, 16)]
    assert cache.length == 16
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_last_only_is_the_last_row_of_the_full_logits(registry, positional):
    model = small_model(registry, positional)
    ids = torch.randint(0, 29, (3, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full, last = model(ids), model(ids, last_only=True)
    assert last.shape == (3, 1, 29)
    torch.testing.assert_close(last, full[:, -1:], rtol=1e-5, atol=1e-5)


def test_generate_asks_for_the_last_position_only_from_an_lm_head(registry, monkeypatch):
    model = small_model(registry, "rope")
    seen = []
    forward = type(model).forward
    monkeypatch.setattr(type(model), "forward", lambda self, *a, **k: seen.append(k["last_only"]) or forward(self, *a, **k))
    generate(model, torch.zeros(1, 3, dtype=torch.long), max_new_tokens=2, temperature=0.0)
    assert seen == [True, True]
    pooling = attrs.evolve(model.provenance["head"], promises=frozenset())  # a head that may pool over positions
    monkeypatch.setitem(model.provenance, "head", pooling)
    seen.clear()
    generate(model, torch.zeros(1, 3, dtype=torch.long), max_new_tokens=2, temperature=0.0)
    assert seen == [False, False]


@given(split=st.integers(1, 15), seed=st.integers(0, 2**16))
def test_any_prefix_split_gives_the_full_forward(registry, split, seed):
    model = _MODELS.setdefault("rope", small_model(registry, "rope"))
    ids = torch.randint(0, 29, (1, 16), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        full = model(ids)
        cache = KVCache.for_model(model, batch_size=1, max_length=16)
        parts = torch.cat((model(ids[:, :split], cache=cache), model(ids[:, split:], start=split, cache=cache)), 1)
    torch.testing.assert_close(parts, full, rtol=1e-4, atol=1e-4)


_MODELS: dict[str, torch.nn.Module] = {}


@pytest.mark.parametrize("positional", ["sinusoidal", "rope"])
def test_unbounded_positions_generate_past_the_context_length(registry, positional):
    model = small_model(registry, positional)
    prompt = torch.tensor([[1, 2, 3]])
    cached = generate(model, prompt, max_new_tokens=30, temperature=0.0)  # up to position 32 > 16
    assert torch.equal(cached, generate(model, prompt, max_new_tokens=30, temperature=0.0, use_cache=False))


def test_learned_positions_past_the_table_fail_before_any_kernel_when_asked_to(registry):
    model = small_model(registry, "learned")
    with pytest.raises(blockspec.ContextLengthError, match=r"positions up to 19.*context_length = 16.*at most 12 new"):
        generate(model, torch.tensor([[1, 2, 3, 4]]), max_new_tokens=16, temperature=0.0, overflow="error")
    assert generate(model, torch.tensor([[1, 2, 3, 4]]), max_new_tokens=12, temperature=0.0,
                    overflow="error").shape == (1, 16)  # the "at most" is right: 12 fit
    for n_prompt in (16, 20):  # no room left: 0 new tokens would be wrong advice
        with pytest.raises(blockspec.ContextLengthError, match="the prompt is too long: shorten it to at most 15 "):
            generate(model, torch.ones(1, n_prompt, dtype=torch.long), max_new_tokens=1, temperature=0.0,
                     overflow="error")
    with pytest.raises(blockspec.InputError, match="overflow: expected 'slide' or 'error'"):
        generate(model, torch.tensor([[1]]), max_new_tokens=1, overflow="wrap")
    with pytest.raises(blockspec.ContextLengthError, match="positions up to 16"):
        model(torch.tensor([[1]]), start=16, cache=KVCache.for_model(model, batch_size=1, max_length=32))


def sliding_reference(model, ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """nanoGPT's loop: greedy, no cache, each step on the last context_length tokens."""
    window = model.positional.max_positions
    with torch.no_grad():
        for _ in range(new_tokens):
            ids = torch.cat((ids, model(ids[:, -window:])[:, -1].argmax(-1, keepdim=True)), dim=1)
    return ids


@pytest.mark.parametrize("n_prompt", [1, 6, 16, 21])
@pytest.mark.parametrize("use_cache", [True, False])
def test_learned_positions_slide_over_the_last_context_length_tokens(registry, n_prompt, use_cache):
    model = small_model(registry, "learned")  # context_length 16
    prompt = torch.randint(0, 29, (2, n_prompt), generator=torch.Generator().manual_seed(n_prompt))
    slid = generate(model, prompt, max_new_tokens=40, temperature=0.0, use_cache=use_cache)
    assert slid.shape == (2, n_prompt + 40)
    assert torch.equal(slid, sliding_reference(model, prompt, 40))


def test_the_tiny_learned_model_generates_200_tokens_and_takes_a_70_token_prompt(registry):
    spec = blockspec.load_spec(EXAMPLE_SPEC, registry)
    model = blockspec.build(spec, registry=registry, seed=0).eval()
    _sharpen(model)
    window = model.positional.max_positions
    assert window == spec.model.context_length == 64
    prompt = torch.randint(0, spec.model.vocab_size, (1, 6), generator=torch.Generator().manual_seed(0))
    assert torch.equal(generate(model, prompt, max_new_tokens=200, temperature=0.0),
                       sliding_reference(model, prompt, 200))
    long_prompt = torch.randint(0, spec.model.vocab_size, (1, 70), generator=torch.Generator().manual_seed(1))
    assert torch.equal(generate(model, long_prompt, max_new_tokens=10, temperature=0.0),
                       sliding_reference(model, long_prompt, 10))


def test_a_full_cache_refuses_more_positions(registry):
    model = small_model(registry, "rope")
    cache = KVCache.for_model(model, batch_size=1, max_length=4)
    model(torch.tensor([[1, 2, 3]]), cache=cache)
    with pytest.raises(blockspec.ContextLengthError, match="KV cache holds 4 positions"):
        model(torch.tensor([[4, 5]]), start=3, cache=cache)
    with pytest.raises(ValueError, match="cannot continue at position 4"):
        model(torch.tensor([[4]]), start=4, cache=cache)


def test_sampling_is_reproducible_under_a_seed_and_respects_top_k(registry):
    model = small_model(registry, "sinusoidal")
    prompt = torch.tensor([[3, 1, 4]])
    first = generate(model, prompt, max_new_tokens=10, temperature=1.5, top_k=3, seed=7)
    assert torch.equal(first, generate(model, prompt, max_new_tokens=10, temperature=1.5, top_k=3, seed=7))
    logits = torch.tensor([[0.0, 5.0, 1.0, 4.0, -2.0]])
    draws = {sample(logits, temperature=10.0, top_k=2, generator=torch.Generator().manual_seed(s)).item()
             for s in range(50)}
    assert draws == {1, 3}


def test_generate_leaves_the_training_mode_as_it_was(registry):
    model = small_model(registry, "learned").train()
    generate(model, torch.tensor([[1]]), max_new_tokens=2, temperature=0.0)
    assert model.training


@pytest.mark.parametrize("bad", [dict(max_new_tokens=-1), dict(temperature=-0.5), dict(top_k=0)])
def test_bad_arguments_are_refused(registry, bad):
    model = small_model(registry, "rope")
    arguments = dict(max_new_tokens=2, temperature=1.0) | bad
    with pytest.raises(blockspec.InputError, match=f"^{next(iter(bad))}: expected "):
        generate(model, torch.tensor([[1]]), **arguments)


@pytest.mark.parametrize("positional", POSITIONALS)
def test_the_uncached_forward_still_compiles_without_graph_breaks(registry, positional):
    model = small_model(registry, positional)
    ids = torch.randint(0, 29, (2, 16), generator=torch.Generator().manual_seed(3))
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(ids), model(ids))


def test_sampling_never_draws_an_id_the_tokenizer_cannot_decode(registry):
    """A 50-character tokenizer on a larger embedding: every sampled id stays below 50."""
    model = small_model(registry, "rope")
    vocab = model.embedding.num_embeddings
    limit = vocab - 7
    bump = torch.zeros(vocab)
    bump[limit:] = 50.0  # make the undecodable ids the likeliest by far
    model.head.register_forward_hook(lambda module, inputs, logits: logits + bump)
    ids = generate(model, torch.tensor([[1, 2, 3]]), max_new_tokens=40, temperature=2.0, seed=0, vocab_limit=limit)
    assert int(ids[:, 3:].max()) < limit
    unlimited = generate(model, torch.tensor([[1, 2, 3]]), max_new_tokens=40, temperature=2.0, seed=0)
    assert int(unlimited[:, 3:].max()) >= limit  # without the limit they would be drawn
