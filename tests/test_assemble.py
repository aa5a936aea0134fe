"""The assembler: shapes through the whole model, tied storage, counts, positions, determinism."""

from __future__ import annotations

import pytest
import torch

import blockspec
from blockspec import ContextLengthError, SpecError
from blockspec.modules.blocks import PostNormBlock, PreNormBlock

from .test_spec import BASE

POSITIONALS = ["learned", "sinusoidal", "rope"]
NORMS = ["layernorm", "rmsnorm"]
ACTIVATIONS = ["relu", "gelu", "silu", "swiglu", "geglu", "clamped_swiglu"]


def spec_of(registry, **changes) -> blockspec.ModelSpec:
    """BASE with table fields replaced, e.g. positional="rope", model={"n_kv_heads": 2}."""
    data = blockspec.spec_to_dict(blockspec.loads_spec(BASE, registry))
    for table, value in changes.items():
        if isinstance(value, str):
            data[table] = {"use": value}
        else:
            data[table].update(value)
    return blockspec.structure_spec(data, registry)


def residual_stream_shapes(model, ids) -> dict[str, tuple[int, ...]]:
    """Output shape of every module between the embedding and the head."""
    shapes, handles = {}, []
    for name, module in model.named_modules():
        if name and not name.startswith(("head", "positional")) and name.count(".") <= 2:
            hook = lambda _m, _i, out, name=name: shapes.__setitem__(name, tuple(out.shape))  # noqa: E731
            handles.append(module.register_forward_hook(hook))
    model(ids)
    for handle in handles:
        handle.remove()
    return shapes


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("positional", POSITIONALS)
def test_every_tensor_between_embedding_and_head_is_b_n_d(registry, positional, norm, activation):
    spec = spec_of(registry, positional=positional, norm=norm, activation=activation)
    model = blockspec.build(spec, registry=registry, seed=0)
    ids = torch.randint(0, 65, (3, 10))
    shapes = residual_stream_shapes(model, ids)
    expected_ff = {"blocks.0.ffn.up": (3, 10, 512 if activation.endswith("glu") else 256),
                   "blocks.0.ffn.act": (3, 10, 256)}
    for name, shape in shapes.items():
        if name in expected_ff:
            assert shape == expected_ff[name], name
        elif ".ffn." not in name:
            assert shape == (3, 10, 64), name
    assert "blocks.1.attn" in shapes and "final_norm" in shapes
    assert model(ids).shape == (3, 10, 65)


def test_tied_head_shares_storage_untied_does_not(registry):
    tied = blockspec.build(spec_of(registry), registry=registry, seed=0)
    assert tied.head.weight is tied.embedding.weight
    assert tied.head.weight.data_ptr() == tied.embedding.weight.data_ptr()
    untied = blockspec.build(spec_of(registry, head={"tied": False}), registry=registry, seed=0)
    assert untied.head.weight.data_ptr() != untied.embedding.weight.data_ptr()
    n_tied = sum(p.numel() for p in tied.parameters())
    assert sum(p.numel() for p in untied.parameters()) - n_tied == 65 * 64


@pytest.mark.parametrize(
    ("stem", "exact"),
    [
        ("gpt2-small", 124_439_808),
        ("gpt2-medium", 354_823_168),
        ("llama2-7b", 6_738_415_616),
        ("tiny-shakespeare", 108_352),
        ("tiny-shakespeare-sinusoidal", 104_256),
    ],
)
def test_parameter_counts_on_meta(example_spec, registry, stem, exact):
    spec = example_spec(stem)
    count = blockspec.count_parameters(spec, registry)
    m = spec.model
    assert count.exact == exact
    assert count.estimate == 12 * m.n_layers * m.d_model**2 + m.vocab_size * m.d_model


def test_meta_build_allocates_nothing(example_spec, registry):
    model = blockspec.build(example_spec("llama2-7b"), registry=registry, device="meta")
    assert all(p.device.type == "meta" for p in model.parameters())


def test_count_matches_a_real_build(example_spec, registry):
    spec = example_spec("tiny-shakespeare")
    model = blockspec.build(spec, registry=registry, seed=0)
    assert sum(p.numel() for p in model.parameters()) == blockspec.count_parameters(spec, registry).exact


def test_same_seed_same_weights_and_global_rng_untouched(registry):
    spec = spec_of(registry)
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = blockspec.build(spec, registry=registry, seed=7)
    assert torch.equal(torch.rand(1), before)  # the seed did not leak into the global generator
    b = blockspec.build(spec, registry=registry, seed=7)
    c = blockspec.build(spec, registry=registry, seed=8)
    for (name, pa), pb, pc in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.embedding.weight, c.embedding.weight)


def test_norm_placement_and_final_norm_defaults(registry):
    pre = blockspec.build(spec_of(registry), registry=registry)
    post = blockspec.build(spec_of(registry, model={"norm_placement": "post"}), registry=registry)
    assert isinstance(pre.blocks[0], PreNormBlock) and isinstance(pre.final_norm, torch.nn.LayerNorm)
    assert isinstance(post.blocks[0], PostNormBlock) and isinstance(post.final_norm, torch.nn.Identity)
    forced = blockspec.build(spec_of(registry, model={"norm_placement": "post", "final_norm": True}), registry=registry)
    assert isinstance(forced.final_norm, torch.nn.LayerNorm)


def test_post_norm_block_output_is_normalised(registry):
    model = blockspec.build(spec_of(registry, model={"norm_placement": "post"}), registry=registry, seed=0)
    out = model.blocks[0](torch.randn(2, 5, 64), model.positional)
    assert torch.allclose(out.mean(-1), torch.zeros(2, 5), atol=1e-5)


def test_bias_switch(registry):
    model = blockspec.build(spec_of(registry, model={"bias": False}), registry=registry)
    assert model.blocks[0].attn.qkv.bias is None and model.blocks[0].ffn.down.bias is None


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_grouped_query_attention_matches_repeated_heads(registry, kv_heads):
    """GQA equals full multi-head attention whose k/v heads are repeated copies."""
    spec = spec_of(registry, positional="rope", model={"n_kv_heads": kv_heads})
    model = blockspec.build(spec, registry=registry, seed=0).eval()
    attn = model.blocks[0].attn
    assert attn.qkv.out_features == 64 + 2 * kv_heads * 16
    x = torch.randn(2, 7, 64)
    q, k, v = attn.project(x, model.positional)
    group = 4 // kv_heads
    k_full, v_full = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, h, N, hs)
    reference = torch.nn.functional.scaled_dot_product_attention(q, k_full, v_full, is_causal=True)
    assert torch.allclose(attn.attend(q, k, v, None), reference, atol=1e-6)


def test_attention_is_causal(registry):
    model = blockspec.build(spec_of(registry, positional="rope"), registry=registry, seed=0).eval()
    ids = torch.randint(0, 65, (1, 12))
    changed = ids.clone()
    changed[0, 6:] = (changed[0, 6:] + 1) % 65
    with torch.no_grad():
        assert torch.allclose(model(ids)[0, :6], model(changed)[0, :6], atol=1e-6)
        assert not torch.allclose(model(ids)[0, 6:], model(changed)[0, 6:])


def test_learned_positions_past_the_table_raise_before_any_kernel(registry):
    model = blockspec.build(spec_of(registry), registry=registry)
    with pytest.raises(ContextLengthError, match="positions up to 64 requested.*0..63"):
        model(torch.zeros(1, 65, dtype=torch.long))
    with pytest.raises(ContextLengthError):
        model(torch.zeros(1, 4, dtype=torch.long), start=61)
    assert isinstance(ContextLengthError("x"), blockspec.BlockspecError)


@pytest.mark.parametrize("positional", ["sinusoidal", "rope"])
def test_unbounded_positions_work_past_context_length(registry, positional):
    model = blockspec.build(spec_of(registry, positional=positional), registry=registry, seed=0).eval()
    ids = torch.randint(0, 65, (1, 100))
    with torch.no_grad():
        long = model(ids)
        assert long.shape == (1, 100, 65)
        assert torch.allclose(long[:, :64], model(ids[:, :64]), atol=1e-5)  # the cached table agrees


def test_classifier_head(registry):
    data = blockspec.spec_to_dict(spec_of(registry))
    data["head"] = {"use": "classifier", "n_classes": 3, "pooling": "mean"}
    spec = blockspec.structure_spec(data, registry)
    model = blockspec.build(spec, registry=registry, seed=0)
    assert model(torch.randint(0, 65, (4, 9))).shape == (4, 3)


def test_dropout_is_active_only_in_training(registry):
    model = blockspec.build(spec_of(registry, model={"dropout": 0.5}), registry=registry, seed=0)
    ids = torch.randint(0, 65, (2, 8))
    model.train()
    assert not torch.equal(model(ids), model(ids))
    model.eval()
    assert torch.equal(model(ids), model(ids))


def test_dtype_and_provenance(registry):
    model = blockspec.build(spec_of(registry), registry=registry, dtype=torch.bfloat16)
    assert model.embedding.weight.dtype == torch.bfloat16
    assert model(torch.zeros(1, 3, dtype=torch.long)).dtype == torch.bfloat16
    assert model.provenance["blocks.1.norm2"].qualified_name == "blockspec-norms:layernorm"
    assert model.provenance["positional"].name == "learned"
    assert model.spec.model.name == "t"


def test_a_component_that_cannot_be_built_is_a_spec_error(registry):
    spec = spec_of(registry, positional="rope", model={"n_heads": 64, "d_model": 64})
    with pytest.raises(SpecError, match=r"\$\.positional: blockspec-positional:rope cannot be built: rope needs an even head_dim"):
        blockspec.build(spec, registry=registry)


def test_init_table_sets_the_drawn_scales(registry):
    default = blockspec.build(blockspec.loads_spec(BASE, registry), registry=registry, seed=0)
    explicit = blockspec.build(blockspec.loads_spec(BASE + "\n[init]\nstd = 0.02\nresidual_scaling = true\n", registry),
                               registry=registry, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(default.state_dict().values(), explicit.state_dict().values()))
    text = BASE.replace('[head]\nuse = "lm"\n', '[head]\nuse = "lm"\ntied = true\n', 1)
    spec = blockspec.loads_spec(text + "\n[init]\nstd = 0.05\nembedding_std = 1.0\nresidual_scaling = false\n", registry)
    model = blockspec.build(spec, registry=registry, seed=0)
    assert model.embedding.weight.std().item() == pytest.approx(1.0, rel=0.1)
    assert model.blocks[0].attn.proj.weight.std().item() == pytest.approx(0.05, rel=0.1)  # not scaled by 1/sqrt(2L)
    assert model.blocks[0].ffn.down.weight.std().item() == pytest.approx(0.05, rel=0.1)
    scaled = blockspec.build(blockspec.loads_spec(text + "\n[init]\nstd = 0.05\n", registry), registry=registry, seed=0)
    assert scaled.blocks[0].attn.proj.weight.std().item() == pytest.approx(0.05 / 2, rel=0.1)  # 1/sqrt(2·2)
    assert scaled.embedding.weight.std().item() == pytest.approx(0.05, rel=0.1)  # embedding_std defaults to std
