"""blockspec-attention's `mla` (multi-head latent attention): transformers' DeepSeek V3 attention on the same
weights, decoding through the latent cache, the cache's size against grouped-query attention, counts, refusals."""

from __future__ import annotations

import pytest
import torch
from tomli_w import dumps

import blockspec
from blockspec.assembly.counting import count_parameters
from blockspec.generation.tokens import generate
from blockspec.modules.kv_cache import KVCache

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

SIZES = dict(d_model=32, n_heads=4, head_dim=8)  # head_dim: each head's rotating part (DeepSeek's qk_rope_head_dim)
MLA = dict(kv_lora_rank=12, nope_head_dim=16, v_head_dim=10)


def spec_of(attention: dict | None = None, model: dict | None = None, layout: str = "interleaved", registry=None):
    document = {"model": {"vocab_size": 41, "context_length": 64, "n_layers": 2, "d_ff": 48, "bias": False,
                          **SIZES, **(model or {})},
                "positional": {"use": "rope", "layout": layout}, "norm": {"use": "rmsnorm"},
                "activation": {"use": "swiglu"}, "head": {"use": "lm", "tied": False},
                "attention": {"use": "mla", **MLA, **(attention or {})}}
    return blockspec.loads_spec(dumps(document), registry, file="spec.toml")


def hugging_face_pair(q_lora_rank: int | None, interleaved: bool):
    """blockspec's LatentAttention and rope, and transformers' DeepseekV3Attention and rotary embedding, holding
    the same (perturbed) weights."""
    from blockspec_attention.mla import LatentAttention
    from blockspec_positional.rope import RotaryPositions
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding

    torch.manual_seed(0)
    ours = LatentAttention(d_model=32, n_heads=4, rope_head_dim=8, nope_head_dim=16, v_head_dim=10, kv_lora_rank=12,
                           q_lora_rank=q_lora_rank, bias=False, dropout=0.0).double()
    config = DeepseekV3Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, qk_rope_head_dim=8,
                              qk_nope_head_dim=16, v_head_dim=10, kv_lora_rank=12, q_lora_rank=q_lora_rank,
                              rope_interleave=interleaved, num_hidden_layers=1, attention_bias=False)
    config._attn_implementation = "eager"
    theirs = DeepseekV3Attention(config, layer_idx=0).double()
    names = {"q_proj": "q_proj", "q_down": "q_a_proj", "q_latent_norm": "q_a_layernorm", "q_up": "q_b_proj",
             "kv_down": "kv_a_proj_with_mqa", "kv_norm": "kv_a_layernorm", "kv_up": "kv_b_proj", "proj": "o_proj"}
    with torch.no_grad():
        for name, parameter in ours.named_parameters():
            parameter.add_(torch.randn_like(parameter) * 0.3)  # norms off their ones too
            module, _, kind = name.rpartition(".")
            getattr(getattr(theirs, names[module]), kind).copy_(parameter)
    rope = RotaryPositions(8, 64, layout="interleaved" if interleaved else "half").double()
    return ours, rope, theirs, DeepseekV3RotaryEmbedding(config)


@pytest.mark.parametrize("q_lora_rank", [None, 6], ids=["full-q", "q-lora"])
@pytest.mark.parametrize("interleaved", [True, False], ids=["interleaved", "half"])
def test_the_same_function_as_transformers_deepseek_v3_attention(q_lora_rank, interleaved):
    pytest.importorskip("transformers")
    from blockspec.modules.attention import causal_mask

    ours, rope, theirs, rotary = hugging_face_pair(q_lora_rank, interleaved)
    x = torch.randn(2, 11, 32, dtype=torch.float64)
    positions = torch.arange(11)[None].expand(2, -1)
    with torch.no_grad():
        cos, sin = rotary(x, positions)
        expected = theirs(x, (cos.double(), sin.double()), causal_mask(11, 11, x.device, x.dtype)[None, None])[0]
        found = ours(x, rope)
    torch.testing.assert_close(found, expected, atol=1e-5, rtol=1e-5)  # transformers' cos and sin are float32


def test_decoding_through_the_latent_cache_gives_the_uncached_logits(registry):
    model = blockspec.build(spec_of(attention={"q_lora_rank": 6}, registry=registry), registry=registry,
                            seed=0).eval()
    ids = torch.randint(0, 41, (2, 13), generator=torch.Generator().manual_seed(1))
    cache = KVCache.for_model(model, batch_size=2, max_length=16)
    with torch.no_grad():
        whole = model(ids)
        steps = [model(ids[:, :5], cache=cache)] + [model(ids[:, i:i + 1], start=i, cache=cache) for i in range(5, 13)]
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, atol=1e-5, rtol=1e-5)
    prompt = ids[:, :4]
    assert torch.equal(generate(model, prompt, max_new_tokens=6, temperature=0.0),
                       generate(model, prompt, max_new_tokens=6, temperature=0.0, use_cache=False))


def test_the_cache_holds_the_latent_and_one_rotary_key_per_token(registry):
    """kv_lora_rank + head_dim numbers per token and layer, against 2·n_kv_heads·head_dim for grouped queries."""
    model = blockspec.build(spec_of(registry=registry), registry=registry, seed=0)
    cache = KVCache.for_model(model, batch_size=1, max_length=10)
    per_token = sum(layer.keys[0, :, 0].numel() + layer.values[0, :, 0].numel() for layer in cache.layers)
    assert per_token == 2 * (MLA["kv_lora_rank"] + SIZES["head_dim"])
    gqa = blockspec.build(blockspec.loads_spec(dumps({
        "model": {"vocab_size": 41, "context_length": 64, "n_layers": 2, "d_ff": 48, "n_kv_heads": 2, **SIZES},
        "positional": {"use": "rope"}, "norm": {"use": "rmsnorm"}, "activation": {"use": "swiglu"},
        "head": {"use": "lm"}}), registry), registry=registry, seed=0)
    gqa_cache = KVCache.for_model(gqa, batch_size=1, max_length=10)
    assert sum(layer.keys[0, :, 0].numel() + layer.values[0, :, 0].numel() for layer in gqa_cache.layers) == \
        2 * 2 * 2 * SIZES["head_dim"]


def test_generation_sizes_its_memory_check_by_the_latent_cache(registry):
    from blockspec.assembly.memory import generation_estimate

    model = blockspec.build(spec_of(registry=registry), registry=registry, seed=0)
    estimate = generation_estimate(model, batch=3, queries=1, length=10, cached=True)
    cache = next(part for part in estimate.parts if part.what == "KV cache")
    assert cache.bytes == 3 * 10 * 2 * (MLA["kv_lora_rank"] + SIZES["head_dim"]) * 4  # B·T·layers·(r + hs)·float32


def test_the_count_is_the_closed_form(registry):
    d, h, rope, nope, v, r, q = 32, 4, 8, 16, 10, 12, 6
    attention = d * q + q + q * h * (nope + rope) + d * (r + rope) + r + r * h * (nope + v) + h * v * d
    plain = count_parameters(spec_of(attention={"q_lora_rank": q}, registry=registry), registry).exact
    spec = spec_of(attention={"q_lora_rank": q}, registry=registry)
    model = blockspec.build(spec, registry=registry, seed=0)
    layer = sum(p.numel() for p in model.blocks[0].attn.parameters())
    assert layer == attention and plain == sum(p.numel() for p in model.parameters())
    full_q = blockspec.build(spec_of(registry=registry), registry=registry, seed=0)
    assert sum(p.numel() for p in full_q.blocks[0].attn.parameters()) == \
        d * h * (nope + rope) + d * (r + rope) + r + r * h * (nope + v) + h * v * d


@pytest.mark.parametrize(("fields", "model", "path", "message"), [
    ({"kv_lora_rank": 0}, {}, "$.attention.kv_lora_rank", "expected a positive integer"),
    ({"q_lora_rank": -2}, {}, "$.attention.q_lora_rank", "expected a positive integer"),
    ({"nope_head_dim": 0}, {}, "$.attention.nope_head_dim", "expected a positive integer"),
    ({}, {"n_kv_heads": 2}, "$.model", "does not serve these sizes"),
])
def test_bad_input_is_refused_in_one_line_at_its_key(fields, model, path, message, registry):
    with pytest.raises(blockspec.SpecError) as caught:
        blockspec.build(spec_of(attention=fields, model=model, registry=registry), registry=registry)
    assert path in str(caught.value) and message in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1


def test_exports_refuse_latent_attention_but_as_deepseek_v3(registry):
    from blockspec.interop.families import FAMILIES

    spec = spec_of(registry=registry)
    others = [family for family in FAMILIES if family.name != "deepseek_v3"]
    assert all(any("attention is 'mla'" in p for p in family.misfits(spec)) for family in others)
    assert not any("attention is" in p for p in next(f for f in FAMILIES if f.name == "deepseek_v3").misfits(spec))
