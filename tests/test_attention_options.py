"""Issue 13: the built-in attention's options, [model] head_dim and embedding_scale, the head's logit softcap,
RMSNorm offset and RoPE fraction: off changes nothing, on changes the output, caches and exports honour them."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tomli_w import dumps

import blockspec
from blockspec.assembly.counting import count_parameters
from blockspec.inspect.trace import trace
from blockspec.interop.families import FAMILIES, family_named
from blockspec.modules.kv_cache import KVCache

BASE_MODEL = {"vocab_size": 23, "context_length": 16, "d_model": 16, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
              "d_ff": 24}


def spec_of(*, model: dict[str, Any] | None = None, attention: dict[str, Any] | None = None,
            norm: dict[str, Any] | None = None, positional: dict[str, Any] | None = None,
            head: dict[str, Any] | None = None, registry=None):
    document = {"model": {**BASE_MODEL, **(model or {})}, "positional": {"use": "rope", **(positional or {})},
                "norm": {"use": "rmsnorm", **(norm or {})}, "activation": {"use": "swiglu"},
                "head": {"use": "lm", "tied": False, **(head or {})}}
    if attention is not None:
        document["attention"] = {"use": "causal", **attention}
    return blockspec.loads_spec(dumps(document), registry)


def logits(spec, registry, ids=None):
    model = blockspec.build(spec, registry=registry, seed=0).eval()
    ids = ids if ids is not None else torch.arange(12)[None] % 23
    with torch.no_grad():
        for module in model.modules():  # biases start at zero: give them a value that shows
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.fill_(0.05)
        return model(ids)


OPTIONS = [
    ({"attention": {"qk_norm": "head"}}, {"attention": {"qk_norm": "none"}}),
    ({"attention": {"qk_norm": "all"}}, {"attention": {}}),
    ({"attention": {"logit_softcap": 0.001}}, {"attention": {}}),  # scores at init are small
    ({"attention": {"sliding_window": 3}}, {"attention": {"sliding_window": 16}}),
    ({"attention": {"query_scale": 1.0}}, {"attention": {}}),
    ({"attention": {"qkv_bias": True}, "model": {"bias": False}}, {"attention": {"qkv_bias": False},
                                                                    "model": {"bias": False}}),
    ({"attention": {"out_bias": True}, "model": {"bias": False}}, {"attention": {"out_bias": False},
                                                                    "model": {"bias": False}}),
    ({"model": {"head_dim": 8}}, {"model": {"head_dim": 4}}),
    ({"model": {"embedding_scale": "sqrt_d"}}, {"model": {}}),
    ({"model": {"embedding_scale": 3.0}}, {"model": {"embedding_scale": 1.0}}),
    ({"head": {"logit_softcap": 0.5}}, {"head": {}}),
    ({"head": {"logit_softcap": 0.5, "tied": True}}, {"head": {"tied": True}}),
    ({"positional": {"fraction": 0.5}}, {"positional": {"fraction": 1.0}}),
    ({"head": {"bias": True}}, {"head": {"bias": False}}),  # the untied head's bias, filled by logits()
    ({"attention": {"sinks": True}}, {"attention": {"sinks": False}}),  # zero sinks still take a share
]


@pytest.mark.parametrize(("on", "off"), OPTIONS, ids=[str(on) for on, _ in OPTIONS])
def test_each_option_changes_the_output_when_on_and_nothing_when_off(on, off, registry):
    plain = logits(spec_of(model={"bias": off.get("model", {}).get("bias", True)},
                           head={"tied": off.get("head", {}).get("tied", False)}, registry=registry), registry)
    assert torch.equal(logits(spec_of(**off, registry=registry), registry), plain)
    changed = logits(spec_of(**on, registry=registry), registry)
    assert changed.shape == plain.shape and not torch.allclose(changed, plain)


def test_offset_rmsnorm_equals_plain_rmsnorm_at_init_and_differs_once_trained(registry):
    plain = logits(spec_of(registry=registry), registry)
    offset_spec = spec_of(norm={"offset": True}, registry=registry)
    assert torch.allclose(logits(offset_spec, registry), plain, atol=1e-6)  # 1 + 0 = the plain norm's 1
    model = blockspec.build(offset_spec, registry=registry, seed=0).eval()
    assert torch.equal(model.final_norm.weight, torch.zeros(16))
    with torch.no_grad():
        model.final_norm.weight.fill_(0.5)
        assert not torch.allclose(model(torch.arange(12)[None] % 23), plain)


def test_offset_qk_norms_equal_plain_ones_at_init_and_differ_once_trained(registry):
    """qk_norm_offset (Gemma 3): the q/k norms store w = 0 and scale by 1 + w, so a fresh model is the
    plain qk-normed one, and moving w moves the logits."""
    plain = logits(spec_of(attention={"qk_norm": "head"}, registry=registry), registry)
    offset_spec = spec_of(attention={"qk_norm": "head", "qk_norm_offset": True}, registry=registry)
    assert torch.allclose(logits(offset_spec, registry), plain, atol=1e-6)
    model = blockspec.build(offset_spec, registry=registry, seed=0).eval()
    attention = model.blocks[0].attn
    assert torch.equal(attention.q_norm.weight, torch.zeros(4)) and torch.equal(attention.k_norm.weight, torch.zeros(4))
    with torch.no_grad():
        attention.k_norm.weight.fill_(0.5)
        assert not torch.allclose(model(torch.arange(12)[None] % 23), plain)


def test_the_offset_norm_is_transformers_gemma3_rmsnorm():
    pytest.importorskip("transformers")
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    from blockspec.plugin import OffsetRMSNorm

    ours, theirs = OffsetRMSNorm(8, eps=1e-6), Gemma3RMSNorm(8, eps=1e-6)
    assert ours.weight.shape == theirs.weight.shape
    with torch.no_grad():
        theirs.weight.copy_(torch.randn(8, generator=torch.Generator().manual_seed(0)))
        ours.weight.copy_(theirs.weight)
        x = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(1))
        assert torch.allclose(ours(x), theirs(x), atol=1e-6, rtol=1e-6)


def test_softcapped_logits_stay_below_the_cap(registry):
    out = logits(spec_of(head={"logit_softcap": 0.25}, registry=registry), registry)
    assert out.abs().max() < 0.25


@pytest.mark.parametrize("attention", [{"sliding_window": 3}, {"logit_softcap": 0.3},
                                       {"sliding_window": 2, "logit_softcap": 1.0, "qk_norm": "all"},
                                       {"sinks": True, "sliding_window": 3}, {"sinks": True, "logit_softcap": 1.0}])
def test_cached_decoding_equals_uncached(attention, registry):
    model = blockspec.build(spec_of(attention=attention, model={"head_dim": 6}, registry=registry),
                            registry=registry, seed=1).eval()
    ids = (torch.arange(20).view(2, 10) * 7) % 23
    cache = KVCache.for_model(model, batch_size=2, max_length=16)
    with torch.no_grad():
        full = model(ids)
        steps = [model(ids[:, :4], cache=cache)]
        steps += [model(ids[:, i:i + 1], start=i, cache=cache) for i in range(4, 10)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


def test_sliding_window_hides_keys_older_than_the_window(registry):
    spec = spec_of(attention={"sliding_window": 3}, model={"n_layers": 1}, registry=registry)
    ids = torch.arange(12)[None] % 23
    changed = ids.clone()
    changed[0, :5] = (changed[0, :5] + 1) % 23  # positions 0..4 change: position 7 and later see 5.. only
    assert torch.allclose(logits(spec, registry, changed)[0, 7:], logits(spec, registry, ids)[0, 7:])
    assert not torch.allclose(logits(spec, registry, changed)[0, 6], logits(spec, registry, ids)[0, 6])


def test_trace_shows_the_new_stages(registry):
    spec = spec_of(attention={"qk_norm": "head", "logit_softcap": 2.0}, model={"embedding_scale": "sqrt_d"},
                   registry=registry)
    model = blockspec.build(spec, registry=registry, seed=0).eval()
    names = trace(model, torch.arange(5)[None] % 23).names()
    for stage in ("embedding.scaled", "blocks.0.attn.q_norm", "blocks.0.attn.k_norm", "blocks.0.attn.scores"):
        assert stage in names
    result = trace(model, torch.arange(5)[None] % 23)
    assert result["blocks.0.attn.scores"].tensor.abs().max() <= 2.0
    rms = result["blocks.0.attn.q_norm"].tensor.pow(2).mean(-1).sqrt()
    assert torch.allclose(rms, torch.ones_like(rms), atol=1e-3)  # the learned scales start at 1


def test_plain_trace_has_none_of_them(registry):
    model = blockspec.build(spec_of(registry=registry), registry=registry, seed=0).eval()
    names = trace(model, torch.arange(5)[None] % 23).names()
    assert not [n for n in names if n.endswith(("q_norm", "k_norm", "scores", "embedding.scaled"))]


def test_parameter_counts_are_exact(registry):
    d, h, kv, hd, layers, vocab, ff = 16, 4, 2, 8, 2, 23, 24
    plain = count_parameters(spec_of(registry=registry), registry).exact
    wide = count_parameters(spec_of(model={"head_dim": hd}, registry=registry), registry).exact
    attention = lambda head_dim: d * (h + 2 * kv) * head_dim + (h + 2 * kv) * head_dim + h * head_dim * d + d  # noqa: E731
    assert wide - plain == layers * (attention(hd) - attention(d // h))
    qk = count_parameters(spec_of(attention={"qk_norm": "head"}, registry=registry), registry).exact
    assert qk - plain == layers * 2 * (d // h)
    qk_all = count_parameters(spec_of(attention={"qk_norm": "all"}, registry=registry), registry).exact
    assert qk_all - plain == layers * (h + kv) * (d // h)
    no_out = count_parameters(spec_of(attention={"out_bias": False}, registry=registry), registry).exact
    assert plain - no_out == layers * d
    sinks = count_parameters(spec_of(attention={"sinks": True}, registry=registry), registry).exact
    assert sinks - plain == layers * h
    assert count_parameters(spec_of(norm={"offset": True}, head={"logit_softcap": 30.0},
                                     attention={"logit_softcap": 50.0, "sliding_window": 4, "query_scale": 0.1},
                                     positional={"fraction": 0.5}, model={"embedding_scale": "sqrt_d"},
                                     registry=registry), registry).exact == plain
    del vocab, ff


def test_existing_specs_dump_unchanged_and_new_fields_round_trip(registry):
    plain = spec_of(attention={}, registry=registry)
    text = blockspec.dump_spec(plain)
    for field in ("qk_norm", "fraction", "offset", "logit_softcap", "head_dim", "embedding_scale", "window", "sinks"):
        assert field not in text
    chosen = spec_of(attention={"qk_norm": "all", "logit_softcap": 5.0, "sliding_window": 4, "query_scale": 0.5,
                                "qkv_bias": True, "out_bias": False, "sinks": True},
                     model={"head_dim": 8, "embedding_scale": "sqrt_d"}, norm={"offset": True},
                     positional={"fraction": 0.25}, head={"logit_softcap": 30.0}, registry=registry)
    assert blockspec.loads_spec(blockspec.dump_spec(chosen), registry) == chosen


@pytest.mark.parametrize(("fields", "path", "message"), [
    ({"model": {"embedding_scale": "sqrt"}}, "$.model.embedding_scale", 'a number > 0.0 or "sqrt_d"'),
    ({"model": {"embedding_scale": -1.0}}, "$.model.embedding_scale", 'a number > 0.0 or "sqrt_d"'),
    ({"model": {"embedding_scale": True}}, "$.model.embedding_scale", "expected a number or a string"),
    ({"model": {"head_dim": 0}}, "$.model.head_dim", "expected a positive integer"),
    ({"attention": {"qk_norm": "heads"}}, "$.attention.qk_norm", "expected one of"),
    ({"attention": {"sliding_window": 0}}, "$.attention.sliding_window", "expected a positive integer"),
    ({"attention": {"logit_softcap": 0.0}}, "$.attention.logit_softcap", "expected a number > 0.0"),
    ({"positional": {"fraction": 1.5}}, "$.positional.fraction", "expected a number in [0.0, 1.0]"),
    ({"attention": {"qk_norm_offset": True}}, "$.attention.qk_norm_offset",
     'only with q/k norms, found qk_norm = "none"'),
])
def test_bad_values_are_reported_at_their_key(fields, path, message, registry):
    with pytest.raises(blockspec.SpecError) as caught:
        spec_of(**fields, registry=registry)
    assert path in str(caught.value) and message in str(caught.value)


def test_head_dim_frees_n_heads_from_dividing_d_model(registry):
    spec = spec_of(model={"n_heads": 3, "n_kv_heads": 1, "head_dim": 6}, registry=registry)
    assert spec.model.head_dim == 6
    assert logits(spec, registry).shape == (1, 12, 23)


@pytest.mark.parametrize(("fields", "reason"), [
    ({"attention": {"qk_norm": "head"}}, "qk_norm"),
    ({"attention": {"logit_softcap": 50.0}}, "logit_softcap"),
    ({"attention": {"sliding_window": 4}}, "sliding_window"),
    ({"attention": {"query_scale": 0.25}}, "query_scale"),
    ({"attention": {"out_bias": False}}, "out_bias"),
    ({"model": {"head_dim": 8}}, "head_dim"),
    ({"model": {"embedding_scale": "sqrt_d"}}, "embedding_scale"),
    ({"norm": {"offset": True}}, "offset"),
    ({"positional": {"fraction": 0.5}}, "fraction"),
    ({"head": {"logit_softcap": 30.0}}, "logit_softcap"),
    ({"attention": {"qk_norm": "head", "qk_norm_offset": True}}, "qk_norm_offset"),
    ({"head": {"bias": True}}, "[head] bias"),
    ({"attention": {"sinks": True}}, "sinks"),
])
def test_each_family_refuses_an_option_or_exports_it_exactly(fields, reason, registry, tmp_path):
    """An export never drops an option: a family that cannot express it names it; one that accepts the spec
    writes a model transformers loads with the same logits. Llama expresses only head_dim of these."""
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM

    from blockspec.interop import export_hf

    from .weights_helpers import randomized

    spec = spec_of(registry=registry, **fields)
    llama_refuses = any(reason in problem for problem in family_named("llama").misfits(spec))
    assert llama_refuses == (reason != "head_dim")
    model = randomized(blockspec.build(spec, registry=registry, seed=0))
    ids = torch.arange(12)[None] % 23  # longer than the window of 4
    for family in (f for f in FAMILIES if not f.misfits(spec)):
        architecture = next(iter(family.architectures))
        export_hf(model, tmp_path / family.name, base_config={"architectures": [architecture]})
        hf_model = AutoModelForCausalLM.from_pretrained(tmp_path / family.name, attn_implementation="eager").eval()
        with torch.no_grad():
            expected, found = model(ids), hf_model(ids).logits
        assert type(hf_model).__name__ == architecture
        assert (found - expected).abs().max().item() <= 1e-4 * max(1.0, expected.abs().max().item()), family.name


@pytest.mark.parametrize("window", [None, 3])
def test_sinks_give_transformers_gpt_oss_attention(window):
    """The sink as SDPA's extra zero key gives what gpt-oss's eager attention (a sink column, dropped) gives."""
    pytest.importorskip("transformers")
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    from blockspec.modules.attention import CausalSelfAttention, causal_mask
    from blockspec.modules.positional import PositionalEncoding

    torch.manual_seed(0)
    attention = CausalSelfAttention(d_model=16, n_heads=4, n_kv_heads=2, bias=False, dropout=0.0, sinks=True,
                                    sliding_window=window).double().eval()
    with torch.no_grad():
        attention.sinks.normal_(0.0, 2.0)
        x = torch.randn(2, 9, 16, dtype=torch.float64)
        q, k, v = attention.project(x, PositionalEncoding())
        ours = attention.attend(q, k, v, None)  # (B, h, N, hs)
        attention.num_key_value_groups = 2  # what transformers' function reads from its module
        mask = causal_mask(9, 9, x.device, x.dtype, window=window)
        theirs = eager_attention_forward(attention, q, k, v, mask, scaling=attention.scale)[0]  # (B, N, h, hs)
    assert torch.allclose(ours, theirs.transpose(1, 2), atol=1e-12, rtol=1e-10)
