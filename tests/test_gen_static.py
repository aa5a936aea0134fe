"""The static decode step (``generation.static_decode``): fixed shapes and a tensor slot, so one compiled
graph serves every step, and its tokens are today's dynamic decoding's, eager or compiled."""

from __future__ import annotations


import types

import pytest
import torch
from attrs import frozen
from hypothesis import example, given
from hypothesis import strategies as st
from tomli_w import dumps
from torch._dynamo.backends.registry import lookup_backend

import blockspec
from blockspec.errors import ContextLengthError, InputError
from blockspec.generation.ragged import pack
from blockspec.generation.static_decode import StaticDecoder, greedy
from blockspec.generation.tokens import generate, sample
from blockspec.modules.attention import CausalSelfAttention, causal_mask, slot_mask
from blockspec.modules.kv_cache import KVCache

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

VOCAB = 29
NEW = 6
KINDS: dict[str, dict] = {  # name -> the spec's tables beyond [model]; every one has GQA (4 heads, 2 kv)
    "learned": {"positional": {"use": "learned"}},
    "sinusoidal": {"positional": {"use": "sinusoidal"}},
    "rope": {"positional": {"use": "rope"}},
    "window": {"positional": {"use": "rope"}, "attention": {"use": "causal", "sliding_window": 3}},
    "softcap": {"positional": {"use": "learned"}, "attention": {"use": "causal", "logit_softcap": 2.0}},
    "sinks": {"positional": {"use": "rope"}, "attention": {"use": "causal", "sinks": True, "sliding_window": 3}},
    "dynamic": {"positional": {"use": "rope", "scaling": "dynamic", "factor": 2.0}},
    "moe": {"positional": {"use": "rope"}, "ffn": {"use": "moe", "n_experts": 4, "top_k": 2}},
}
PROMPTS = [[3, 1, 4, 1, 5, 9, 2], [6, 5], [3, 5, 8, 9]]  # a ragged batch: row 1 padded most


def kind_model(name: str, registry) -> torch.nn.Module:
    """A tiny model of one kind; the embedding sharpened so greedy ties cannot flip."""
    model = {"name": f"static-{name}", "vocab_size": VOCAB, "context_length": 16, "d_model": 32, "n_layers": 2,
             "n_heads": 4, "n_kv_heads": 2, "d_ff": 48}
    document = {"model": model, "norm": {"use": "layernorm"}, "activation": {"use": "gelu"},
                "head": {"use": "lm"}, **KINDS[name]}
    built = blockspec.build(blockspec.loads_spec(dumps(document), registry), registry=registry, seed=0)
    with torch.no_grad():
        built.embedding.weight.mul_(25.0)
    return built.eval()


@pytest.fixture(scope="module")
def models(registry):
    return {name: kind_model(name, registry) for name in KINDS}


def counting_backend():
    """aot_eager, counting the graphs it is handed: one for all steps, or the step recompiled."""
    graphs: list[int] = []

    def backend(gm, inputs):
        graphs.append(len(gm.graph.nodes))
        return lookup_backend("aot_eager")(gm, inputs)

    return backend, graphs


def static_tokens(model, prompts: list[list[int]], **compiled) -> list[list[int]]:
    """Each prompt's NEW greedy tokens from one static decoder over the (left-padded) batch."""
    ids, padding = pack(prompts)
    with torch.inference_mode():
        decoder = StaticDecoder(model, batch_size=len(prompts), max_length=ids.shape[1] + NEW, padding=padding,
                                **compiled)
        return greedy(decoder, ids, NEW).tolist()


def dynamic_tokens(model, prompts: list[list[int]]) -> list[list[int]]:
    """Today's cached ``generate``, greedy: the tokens the static step must give."""
    found = generate(model, prompts, max_new_tokens=NEW, temperature=0.0)
    return [row[len(prompt):].tolist() for prompt, row in zip(prompts, found)]


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "dynamic"])
@pytest.mark.parametrize("prompts", [PROMPTS[:1] * 2, PROMPTS], ids=["equal", "ragged"])
def test_eager_static_decoding_gives_the_dynamic_tokens(models, kind, prompts):
    assert static_tokens(models[kind], prompts) == dynamic_tokens(models[kind], prompts)


def step_logits(model, prompts: list[list[int]], following: torch.Tensor, static: bool) -> torch.Tensor:
    """The logits (T + 1, B, |V|) of the prefill and of T steps fed ``following`` (B, T), from a static decoder
    or from today's cache at int starts."""
    ids, padding = pack(prompts)
    n, length = ids.shape[1], ids.shape[1] + following.shape[1]
    with torch.inference_mode():
        if static:
            decoder = StaticDecoder(model, batch_size=len(prompts), max_length=length, padding=padding)
            found = [decoder.prefill(ids)]
            found += [decoder.step(following[:, t:t + 1], torch.tensor(n + t)) for t in range(following.shape[1])]
            return torch.stack(found)  # T + 1 x (B, |V|) -> (T + 1, B, |V|)
        cache = KVCache.for_model(model, batch_size=len(prompts), max_length=length, padding=padding)
        found = [model(ids, cache=cache)[:, -1]]
        found += [model(following[:, t:t + 1], start=n + t, cache=cache)[:, -1] for t in range(following.shape[1])]
        return torch.stack(found)  # T + 1 x (B, |V|) -> (T + 1, B, |V|)


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "dynamic"])
@given(prompts=st.lists(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=8), min_size=1, max_size=3),
       steps=st.integers(1, 7), seed=st.integers(0, 2**16))
@example(prompts=PROMPTS[:1] * 2, steps=NEW, seed=1).via("equal rows: no padding, no key mask")
@example(prompts=PROMPTS, steps=NEW, seed=1).via("a ragged batch")
def test_each_static_step_gives_the_dynamic_logits(models, kind, prompts, steps, seed):
    """Sharper than the tokens: an unwritten slot seen, or a window off by one, moves the logits."""
    following = torch.randint(VOCAB, (len(prompts), steps), generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(step_logits(models[kind], prompts, following, static=True),
                               step_logits(models[kind], prompts, following, static=False), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["learned", "window", "softcap"])
def test_compiled_static_decoding_is_one_graph_with_the_dynamic_tokens(models, kind):
    """fullgraph=True raises on any graph break; one graph handed to the backend means no step recompiled."""
    torch._dynamo.reset()
    backend, graphs = counting_backend()
    assert static_tokens(models[kind], PROMPTS, compile=True, backend=backend) == dynamic_tokens(models[kind], PROMPTS)
    assert len(graphs) == 1


def test_an_unpadded_compiled_batch_is_one_graph_too(models):
    """No padding: the step has no key mask, only the slot mask, and still never recompiles."""
    torch._dynamo.reset()
    backend, graphs = counting_backend()
    prompts = [PROMPTS[0], PROMPTS[0][::-1]]
    assert static_tokens(models["sinusoidal"], prompts, compile=True, backend=backend) == \
        dynamic_tokens(models["sinusoidal"], prompts)
    assert len(graphs) == 1


def sampled_tokens(model, prompts: list[list[int]], seed: int, **compiled) -> list[list[int]]:
    """NEW tokens drawn at temperature 8 with top-k from a static decoder, each row from its own generator
    seeded ``seed``, as ``generate`` seeds a ragged batch: the sampling outside the graph, as the loop does it."""
    ids, padding = pack(prompts)
    generators = [torch.Generator().manual_seed(seed) for _ in prompts]
    with torch.inference_mode():
        decoder = StaticDecoder(model, batch_size=len(prompts), max_length=ids.shape[1] + NEW, padding=padding,
                                **compiled)
        token = sample(decoder.prefill(ids), temperature=8.0, top_k=8, generator=generators)  # (B, 1)
        found = [token]
        for t in range(NEW - 1):
            found.append(sample(decoder.step(found[-1], torch.tensor(ids.shape[1] + t)), temperature=8.0, top_k=8,
                                generator=generators))
    return torch.cat(found, dim=1).tolist()  # NEW x (B, 1) -> (B, NEW)


def test_seeded_compiled_draws_are_the_dynamic_draws(models):
    torch._dynamo.reset()
    found = generate(models["rope"], PROMPTS, max_new_tokens=NEW, temperature=8.0, top_k=8, seed=4)
    expected = [row[len(prompt):].tolist() for prompt, row in zip(PROMPTS, found)]
    assert sampled_tokens(models["rope"], PROMPTS, 4, compile=True, backend="aot_eager") == expected


@pytest.mark.slow
def test_inductor_compiled_decoding_gives_the_dynamic_tokens(models):
    """The default backend (C++ kernels from inductor on the CPU), as ``--compile`` runs it."""
    torch._dynamo.reset()
    assert static_tokens(models["rope"], PROMPTS, compile=True) == dynamic_tokens(models["rope"], PROMPTS)


@given(start=st.integers(0, 9), n_q=st.integers(1, 4), room=st.integers(0, 5),
       window=st.one_of(st.none(), st.integers(1, 6)))
def test_the_slot_mask_is_the_causal_mask_over_the_written_slots(start, n_q, room, window):
    """Over the keys written so far the slot mask is today's bottom-right causal mask; unwritten slots
    (beyond the queries) are hidden."""
    n_k = start + n_q
    queries, keys = start + torch.arange(n_q), torch.arange(n_k + room)
    found = slot_mask(queries, keys, torch.float32, window=window)
    expected = causal_mask(n_q, n_k, torch.device("cpu"), torch.float32, window=window)
    assert torch.equal(found[:, :n_k], expected)
    assert bool((found[:, n_k:] == float("-inf")).all())


def test_an_encoder_without_tensor_positions_is_refused_up_front(models):
    with pytest.raises(InputError, match=r"positional: .*positional 'rope'.*drop compile=True") as caught:
        StaticDecoder(models["dynamic"], batch_size=1, max_length=8)
    assert "\n" not in str(caught.value)


def test_an_attention_other_than_the_cores_is_refused_up_front(registry):
    model = kind_model("rope", registry)
    model.blocks[1].attn.__class__ = type("TheirAttention", (CausalSelfAttention,), {})
    with pytest.raises(InputError, match=r"blocks\.1\.attn: .*attention 'causal'.*drop compile=True"):
        StaticDecoder(model, batch_size=1, max_length=8)


def test_a_learned_table_shorter_than_the_request_is_refused_up_front(models):
    with pytest.raises(ContextLengthError, match=r"needs 17 positions.*0\.\.15"):
        StaticDecoder(models["learned"], batch_size=1, max_length=17)


class HostSyncFFN(torch.nn.Module):
    """A feed-forward layer that branches on a value, as a Python `if` over a tensor does: a graph break."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) if bool(x.sum() > 0) else -self.proj(x)


@frozen
class HostSyncConfig:
    pass


def _host_sync_registry():
    plugin = types.ModuleType("test_host_sync_plugin")

    @blockspec.hookimpl
    def blockspec_register(register):
        register("ffn", "hostsync", HostSyncConfig, lambda c, ctx: HostSyncFFN(ctx.model.d_model))

    plugin.blockspec_register = blockspec_register
    return blockspec.load_registry(plugins=[(plugin, "test-host-sync", "0.0")])


def test_a_component_that_breaks_the_graph_is_one_line_naming_where():
    """A value-dependent branch in a component: fullgraph refuses it at the first step, in one line."""
    document = {"model": {"name": "static-hostsync", "vocab_size": VOCAB, "context_length": 16, "d_model": 16,
                          "n_layers": 1, "n_heads": 2, "d_ff": 16},
                "norm": {"use": "layernorm"}, "activation": {"use": "gelu"}, "head": {"use": "lm"},
                "positional": {"use": "rope"}, "ffn": {"use": "hostsync"}}
    registry = _host_sync_registry()
    model = blockspec.build(blockspec.loads_spec(dumps(document), registry), registry=registry, seed=0).eval()
    torch._dynamo.reset()
    where = r"test_gen_static.py:\d+ in forward"
    with pytest.raises(InputError, match=rf"^compile: .*a graph break: .*{where}.*drop compile=True$") as caught:
        static_tokens(model, [[1, 2, 3]], compile=True, backend="aot_eager")
    assert "\n" not in str(caught.value)


@pytest.fixture
def quick_compile(monkeypatch):
    """``compile=True`` through generate, with the fast aot_eager backend (fullgraph still raises on a break)."""
    import blockspec.generation.tokens as tokens

    torch._dynamo.reset()
    made: list[StaticDecoder] = []

    def decoder(*args, **kwargs):
        made.append(StaticDecoder(*args, backend="aot_eager", **kwargs))
        return made[-1]

    monkeypatch.setattr(tokens, "StaticDecoder", decoder)
    return made


@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=8.0, top_k=8, seed=4),
                                      dict(temperature=0.0, stop_ids=[20])])
def test_generate_with_compile_gives_generates_tokens(models, quick_compile, sampling):
    """The settings' ``compile``: a ragged batch through the compiled step, greedy, seeded and with a stop."""
    plain = generate(models["rope"], PROMPTS, max_new_tokens=NEW, **sampling)
    compiled = generate(models["rope"], PROMPTS, max_new_tokens=NEW, compile=True, **sampling)
    assert [row.tolist() for row in compiled] == [row.tolist() for row in plain]
    assert len(quick_compile) == 1 and quick_compile[0].cache.padding is not None  # one ragged static decoder


def test_compile_without_the_cache_or_with_a_draft_is_refused(models):
    from blockspec.generation.speculative import speculative_generate

    with pytest.raises(blockspec.errors.InputError, match="^compile: expected the KV cache on"):
        generate(models["rope"], PROMPTS, max_new_tokens=2, compile=True, use_cache=False)
    with pytest.raises(blockspec.errors.InputError, match="^compile: expected False with a draft model"):
        speculative_generate(models["rope"], models["rope"], torch.tensor([PROMPTS[0]]), max_new_tokens=2,
                             compile=True)
