"""[[layers]]: per-layer variation of the block, attention, ffn, norm and activation tables.

The Gemma-style patterns (alternating layers, five local to one global, the first layers dense),
the errors naming the entry and the layer, the round trip, show's grouping, checkpoints and the
KV cache on a model whose layers differ.
"""

from __future__ import annotations

import attrs
import pytest
import torch
from attrs import frozen
from hypothesis import given
from hypothesis import strategies as st

import blockspec
from blockspec.checkpoint.directory import load, save
from blockspec.errors import SpecError
from blockspec.inspect.summary import fold_blocks, summarize
from blockspec.registry.components import Component, Registry
from blockspec.registry.specs import RegistryResolver
from blockspec.spec import toml_read
from blockspec.spec.convert import read_spec
from blockspec.generation.tokens import generate

BASE = """\
[model]
vocab_size = 64
context_length = 32
d_model = 32
n_layers = {n_layers}
n_heads = 4
d_ff = 64

[positional]
use = "rope"

[norm]
use = "rmsnorm"
eps = 1e-6

[activation]
use = "gelu"

[head]
use = "lm"
"""


@frozen(kw_only=True)
class NarrowConfig:
    width: int = 16


def build_narrow(config: NarrowConfig, ctx):
    from blockspec.modules.feed_forward import FeedForward

    return FeedForward(d_model=ctx.model.d_model, d_ff=config.width, activation=ctx.layer.activation("act"),
                       bias=ctx.model.bias)


NARROW = Component(kind="ffn", name="narrow", config_cls=NarrowConfig, build=build_narrow,
                   distribution="test-ffns", version="1.0", promises=frozenset({"position_wise"}))


@pytest.fixture(scope="module")
def registry_plus(registry) -> Registry:
    """The installed components and a second FFN, as a mixture-of-experts plugin would add one."""
    return Registry.of([*registry, NARROW])


def spec_of(layers: str, registry: Registry, n_layers: int = 6) -> blockspec.ModelSpec:
    return blockspec.loads_spec(BASE.format(n_layers=n_layers) + layers, registry, file="spec.toml")


def problems_of(layers: str, registry: Registry, n_layers: int = 6) -> list[str]:
    with pytest.raises(SpecError) as caught:
        spec_of(layers, registry, n_layers)
    return str(caught.value).splitlines()


ALTERNATING = """
[[layers]]
every = 2            # layers 0, 2, 4: "local"
norm = { eps = 1e-5 }
block = { use = "parallel", shared_norm = true }
"""


def test_alternating_layers_gemma2(registry):
    spec = spec_of(ALTERNATING, registry)
    for i in range(6):
        layer = spec.layer(i)
        assert layer.norm.config.eps == (1e-5 if i % 2 == 0 else 1e-6)
        assert (layer.block.name, getattr(layer.block.config, "shared_norm", None)) == \
            (("parallel", True) if i % 2 == 0 else ("pre", None))
    assert spec.norm.config.eps == 1e-6  # the model-wide table, and the final norm, stay as written
    model = blockspec.build(spec, registry=registry, seed=0)
    assert [type(b).__name__ for b in model.blocks] == ["ParallelBlock", "PreNormBlock"] * 3
    assert model.blocks[0].norm1.eps == 1e-5 and model.blocks[1].norm1.eps == 1e-6
    assert model.provenance["blocks.0"].name == "parallel" and model.provenance["blocks.1"].name == "pre"


FIVE_TO_ONE = """
[[layers]]
every = 6
offset = 5           # layers 5, 11: "global"
norm = { use = "rmsnorm" }   # a use starts afresh: the component's defaults, not the model-wide eps
"""


def test_five_local_to_one_global_gemma3(registry):
    spec = spec_of(FIVE_TO_ONE, registry, n_layers=12)
    default_eps = type(spec.norm.config)().eps
    assert [i for i in range(12) if spec.layer(i).norm.config.eps == default_eps] == [5, 11]
    assert all(spec.layer(i).norm.config.eps == 1e-6 for i in range(12) if i not in (5, 11))


GEMMA3_ROPE = """
[[layers]]
every = 6
offset = 5           # layers 5, 11: global, with another RoPE base
positional = { base = 1000000.0 }
"""


def test_gemma3_global_layers_rotate_with_their_own_rope_base(registry):
    spec = spec_of(GEMMA3_ROPE, registry, n_layers=12)
    model = blockspec.build(spec, registry=registry, seed=0).eval()
    bases = [p.base for p in model.block_positionals]
    assert bases == [1e6 if i in (5, 11) else 1e4 for i in range(12)]
    assert model.block_positionals[5] is model.block_positionals[11]  # one module per distinct table
    assert model.provenance["layer_positional.5"].qualified_name == "blockspec-positional:rope"
    assert list(model.state_dict()) == list(blockspec.build(spec_of("", registry, 12), registry=registry).state_dict())
    ids = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(0))
    cached = generate(model, ids, max_new_tokens=8, temperature=0.0)
    assert torch.equal(cached, generate(model, ids, max_new_tokens=8, temperature=0.0, use_cache=False))


def test_the_varied_base_changes_only_its_layers(registry):
    varied = blockspec.build(spec_of(GEMMA3_ROPE, registry, n_layers=6), registry=registry, seed=0).eval()
    plain = blockspec.build(spec_of("", registry, n_layers=6), registry=registry, seed=0).eval()
    ids = torch.randint(0, 64, (1, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert not torch.allclose(varied(ids), plain(ids))
        x = plain.embedding(ids)
        for i in range(5):
            assert torch.equal(varied.blocks[i](x, varied.block_positionals[i]), plain.blocks[i](x, plain.positional))


def test_an_additive_encoder_cannot_vary_per_layer(registry):
    text = BASE.format(n_layers=4).replace('use = "rope"', 'use = "sinusoidal"') + \
        '\n[[layers]]\nindex = [1]\npositional = { base = 500.0 }\n'
    spec = blockspec.loads_spec(text, registry, file="spec.toml")
    with pytest.raises(SpecError, match=r"adds to the embeddings, once for the whole model: it cannot vary per "
                                        r"layer \(layer 1\)"):
        blockspec.build(spec, registry=registry)


def test_a_checkpoint_with_a_varied_positional_loads_the_same_model(registry, tmp_path):
    model = blockspec.build(spec_of(GEMMA3_ROPE, registry, n_layers=6), registry=registry, seed=0).eval()
    save(model, tmp_path / "ckpt")
    again = load(tmp_path / "ckpt", registry=registry).eval()
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(model(ids), again(ids))
    assert again.block_positionals[5].base == 1e6


NOPE_EVERY_FOURTH = """
[[layers]]
every = 4
offset = 3           # layers 3, 7: no positional encoding at all (SmolLM3's NoPE layers)
positional = { use = "none" }
"""


def test_rope_free_layers_build_no_encoder_and_decode_through_the_cache(registry, one_thread):
    spec = spec_of(NOPE_EVERY_FOURTH, registry, n_layers=8)
    model = blockspec.build(spec, registry=registry, seed=0).eval()
    kinds = [type(p).__name__ for p in model.block_positionals]
    assert kinds == ["RotaryPositions"] * 3 + ["NoPositions"] + ["RotaryPositions"] * 3 + ["NoPositions"]
    assert model.provenance["layer_positional.3"].qualified_name == "blockspec-positional:none"
    prompt = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(3))
    cached = generate(model, prompt, max_new_tokens=8, temperature=0.0)
    assert torch.equal(cached, generate(model, prompt, max_new_tokens=8, temperature=0.0, use_cache=False))


@pytest.mark.parametrize("use", ["none", "rope"])
def test_a_model_without_positions_sees_the_earlier_tokens_as_a_set(registry, use):
    """One NoPE layer: the last token's logits survive reversing the tokens before it; with RoPE they do not.
    (With two layers they do not either: the first layer's outputs at earlier positions depend on the order.)"""
    text = BASE.format(n_layers=1).replace('use = "rope"', f'use = "{use}"')
    model = blockspec.build(blockspec.loads_spec(text, registry, file="spec.toml"), registry=registry, seed=0)
    ids = torch.randint(0, 64, (1, 9), generator=torch.Generator().manual_seed(4))
    reordered = torch.cat((ids[:, :-1].flip(1), ids[:, -1:]), dim=1)  # (1, N): tokens 0..N-2 reversed
    with torch.no_grad():
        last, again = model.double()(ids)[:, -1], model(reordered)[:, -1]
    assert torch.allclose(last, again, atol=1e-12, rtol=0) == (use == "none")


FIRST_DENSE = """
[[layers]]
from = 2             # layers 2..5
ffn = { use = "narrow", width = 8 }
"""


def test_first_layers_dense_then_another_ffn(registry_plus):
    spec = spec_of(FIRST_DENSE, registry_plus)
    assert [spec.layer(i).ffn.name for i in range(6)] == ["dense", "dense", "narrow", "narrow", "narrow", "narrow"]
    model = blockspec.build(spec, registry=registry_plus, seed=0)
    assert model.blocks[1].ffn.up.weight.shape == (64, 32)
    assert model.blocks[2].ffn.up.weight.shape == (8, 32)
    assert model.provenance["blocks.2.ffn"].distribution == "test-ffns"


def test_later_entries_win_and_merge_over_earlier_ones(registry):
    spec = spec_of("""
[[layers]]
from = 0
to = 3
block = { use = "parallel" }
[[layers]]
index = [1, 3]
block = { shared_norm = true }
""", registry)
    blocks = [(spec.layer(i).block.name, getattr(spec.layer(i).block.config, "shared_norm", None)) for i in range(6)]
    assert blocks == [("parallel", False), ("parallel", True), ("parallel", False), ("parallel", True),
                      ("pre", None), ("pre", None)]


def test_errors_name_the_entry_the_layers_and_the_line(registry):
    lines = problems_of("""
[[layers]]
every = 2
norm = { eps = 1e-5 }

[[layers]]
index = [3]
norm = { eps = "small" }

[[layers]]
index = [1, 9]
norm = { eps = 1e-5 }

[[layers]]
every = 4
offset = 3
to = 2
norm = { eps = 1e-5 }

[[layers]]
offset = 3
evry = 2
""", registry)
    assert len(lines) == 5, lines  # every problem at once
    assert "spec.toml:28: $.layers[1].norm.eps: expected a number, found str 'small' (layer 3)" in lines
    assert "spec.toml:31: $.layers[2].index: layer 9 does not exist: the model has 6 layers (0 to 5)" in lines
    assert any(line.startswith("spec.toml:34: $.layers[3]: selects no layer") for line in lines)
    assert any("$.layers[4].evry: unknown key 'evry'; did you mean 'every'?" in line for line in lines)
    assert any("$.layers[4].offset: offset counts in steps of every" in line for line in lines)


def test_a_problem_in_several_layers_is_reported_once(registry):
    lines = problems_of('\n[[layers]]\nfrom = 1\nblock = { use = "parallel", shared_nrm = true }\n', registry)
    assert lines == ["spec.toml:24: $.layers[0].block.shared_nrm: unknown key 'shared_nrm' (layers 1-5); "
                     "did you mean 'shared_norm'?"]


def test_registry_resolution_happens_once_per_distinct_component(registry_plus, monkeypatch):
    resolver = RegistryResolver(registry_plus)
    asked: list[tuple[str, str]] = []
    resolve = resolver.resolve
    monkeypatch.setattr(resolver, "resolve", lambda kind, use: asked.append((kind, use)) or resolve(kind, use))
    text = BASE.format(n_layers=6) + FIRST_DENSE + '\n[[layers]]\nevery = 2\nnorm = { use = "rmsnorm" }\n'
    spec = read_spec(toml_read.parse(text, None), resolver, text=text)
    assert len(asked) == len(set(asked))
    looked_up: list[tuple] = []
    get = Registry.get
    monkeypatch.setattr(Registry, "get", lambda self, *key: looked_up.append(key) or get(self, *key))
    blockspec.build(spec, registry=registry_plus, seed=0)
    assert len(looked_up) == len(set(looked_up))


SELECTORS = st.one_of(
    st.builds(lambda xs: {"index": sorted(xs)}, st.sets(st.integers(0, 5), min_size=1, max_size=3)),
    st.builds(lambda every, offset: {"every": every, "offset": offset}, st.integers(1, 3), st.integers(0, 2)),
    st.builds(lambda start, length: {"from": start, "to": start + length}, st.integers(0, 3), st.integers(0, 2)),
    st.builds(lambda start: {"from": start}, st.integers(0, 5)),
)
OVERRIDES = st.one_of(
    st.builds(lambda eps: {"norm": {"eps": eps}}, st.sampled_from([1e-5, 1e-6, 1e-8])),
    st.just({"norm": {"use": "layernorm"}}),
    st.builds(lambda shared: {"block": {"use": "parallel", "shared_norm": shared}}, st.booleans()),
    st.just({"activation": {"use": "silu"}}),
    st.builds(lambda base: {"positional": {"base": base}}, st.sampled_from([500.0, 1e6])),
)


@given(st.lists(st.tuples(SELECTORS, OVERRIDES), min_size=1, max_size=4))
def test_load_dump_load_is_the_same_spec(registry, entries):
    data = toml_read.parse(BASE.format(n_layers=6), None)
    data["layers"] = [{**selector, **override} for selector, override in entries]
    spec = blockspec.structure_spec(data, registry)
    text = blockspec.dump_spec(spec)
    again = blockspec.loads_spec(text, registry)
    assert again == spec
    assert [again.layer(i) for i in range(6)] == [spec.layer(i) for i in range(6)]
    assert blockspec.dump_spec(again) == text


def test_a_spec_without_layers_dumps_as_before(registry):
    spec = spec_of("", registry)
    assert spec.layers == () and "[[layers]]" not in blockspec.dump_spec(spec)
    assert spec.layer(3).norm is spec.norm


def test_show_groups_identical_consecutive_layers_only(registry, registry_plus):
    spec = spec_of(FIRST_DENSE, registry_plus)
    summary = summarize(spec, registry_plus)
    paths = [row.path for row in fold_blocks(summary.rows, summary.layer_groups) if row.path.startswith("blocks.")
             and row.depth == 0]
    assert paths == ["blocks.0", "blocks.1", "blocks.2-5"]
    # norms that differ only in eps have the same type and size: the config keeps them apart
    alternating = summarize(spec_of("\n[[layers]]\nevery = 2\nnorm = { eps = 1e-5 }\n", registry), registry)
    paths = [row.path for row in fold_blocks(alternating.rows, alternating.layer_groups)
             if row.path.startswith("blocks.") and row.depth == 0]
    assert paths == [f"blocks.{i}" for i in range(6)]


def test_checkpoint_round_trip_of_a_varied_model(registry_plus, tmp_path):
    spec = spec_of(FIRST_DENSE + ALTERNATING, registry_plus)
    model = blockspec.build(spec, registry=registry_plus, seed=0)
    save(model, tmp_path / "ckpt")
    assert "ffn:narrow" in (tmp_path / "ckpt" / "spec.toml").read_text()  # the [lock] names it
    loaded = load(tmp_path / "ckpt", registry=registry_plus)
    assert loaded.spec == spec
    assert [loaded.spec.layer(i) for i in range(6)] == [spec.layer(i) for i in range(6)]
    ids = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(ids), model.eval()(ids), rtol=0, atol=0)


def test_cached_generation_matches_uncached_on_a_varied_model(registry_plus, one_thread):
    spec = spec_of(FIRST_DENSE + ALTERNATING, registry_plus)
    model = blockspec.build(spec, registry=registry_plus, seed=0).eval()
    prompt = torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(1))
    cached = generate(model, prompt, max_new_tokens=8, temperature=0.0, use_cache=True)
    uncached = generate(model, prompt, max_new_tokens=8, temperature=0.0, use_cache=False)
    assert torch.equal(cached, uncached)


def test_hugging_face_export_refuses_varied_layers(registry):
    from blockspec.interop.families import FAMILIES

    assert all(any("[[layers]]" in p for p in family.misfits(spec_of(ALTERNATING, registry))) for family in FAMILIES)


def test_evolve_builds_what_the_evolved_spec_says(registry):
    """Bug 5: the per-layer components follow a change of the model-wide table they come from."""
    spec = spec_of("\n[[layers]]\nindex = [1]\nnorm = { eps = 1e-5 }\n", registry)
    relu = blockspec.loads_spec(BASE.format(n_layers=6).replace('use = "gelu"', 'use = "relu"'), registry).activation
    evolved = attrs.evolve(spec, activation=relu)
    assert [evolved.layer(i).activation.name for i in range(6)] == ["relu"] * 6
    assert evolved.layer(1).norm.config.eps == 1e-5  # the entry still applies over the model-wide table
    model = blockspec.build(evolved, registry=registry, seed=0)
    assert {type(block.ffn.act).__name__ for block in model.blocks} == {"ReLU"}
    again = blockspec.loads_spec(blockspec.dump_spec(evolved), registry)
    assert again == evolved and [again.layer(i) for i in range(6)] == [evolved.layer(i) for i in range(6)]
    assert evolved != spec


def test_evolve_of_a_field_an_entry_overrides_keeps_the_entry(registry):
    spec = spec_of("\n[[layers]]\nevery = 2\nnorm = { eps = 1e-5 }\n", registry)
    layernorm = blockspec.loads_spec(BASE.format(n_layers=6).replace('use = "rmsnorm"', 'use = "layernorm"'),
                                     registry).norm
    evolved = attrs.evolve(spec, norm=layernorm)
    assert [evolved.layer(i).norm.name for i in range(6)] == ["layernorm"] * 6
    assert [evolved.layer(i).norm.config.eps for i in range(6)] == [1e-5, 1e-6] * 3
    assert blockspec.loads_spec(blockspec.dump_spec(evolved), registry) == evolved


def test_evolve_of_the_layer_count_reselects_the_entries(registry):
    spec = spec_of("\n[[layers]]\nfrom = 2\nblock = { use = \"parallel\" }\n", registry, n_layers=4)
    longer = attrs.evolve(spec, model=attrs.evolve(spec.model, n_layers=6))
    assert [longer.layer(i).block.name for i in range(6)] == ["pre", "pre"] + ["parallel"] * 4
    assert len(blockspec.build(longer, registry=registry, seed=0).blocks) == 6


def test_evolve_to_a_table_an_entry_cannot_apply_to_says_which_entry_and_layer(registry):
    spec = spec_of('\n[block]\nuse = "parallel"\n\n[[layers]]\nindex = [1]\nblock = { shared_norm = true }\n', registry)
    with pytest.raises(ValueError, match=r"\[\[layers\]\] entry 0 gives layer 1 a block table 'blockspec:pre' "
                                         r"cannot hold: .*shared_norm"):
        attrs.evolve(spec, block=spec_of("", registry).block)
