"""Whole models from random valid specs drawn over the first-party registry."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import blockspec
from blockspec.registry.catalogue import catalogue
from blockspec.testing.formulas import attention_parameters, layernorm_parameters, model_parameters
from blockspec.testing.strategies import model_specs, token_batches

FIRST_PARTY = {"blockspec", *catalogue()}
GATED = {"swiglu", "geglu", "clamped_swiglu"}
NORMS_PER_BLOCK = {"pre": 2, "post": 2, "parallel": 2, "sandwich": 4, "output_norm": 2}  # the core's blocks and blockspec-blocks'


def block_norms(spec: blockspec.ModelSpec) -> int:
    """How many norms each layer of the spec's block holds (parallel's shared_norm: one for both sublayers)."""
    if spec.block.name == "parallel" and spec.block.config.shared_norm:
        return 1
    return NORMS_PER_BLOCK[spec.block.name]


def _first_party(component) -> bool:
    return component.distribution in FIRST_PARTY


def moe_parameters(spec: blockspec.ModelSpec) -> int:
    """blockspec-moe's ffn:moe: router (d -> E), E experts of the dense FFN's shape, the shared experts
    fused into one FFN of n_shared·d_ff, and their gate (d -> 1)."""
    m, config = spec.model, spec.ffn.config
    d_ff = config.expert_d_ff if config.expert_d_ff is not None else m.d_ff
    gated = 2 if spec.activation.name in GATED else 1
    dense = m.d_model * gated * d_ff + d_ff * m.d_model + ((gated * d_ff + m.d_model) if m.bias else 0)
    shared_ff = config.n_shared_experts * d_ff
    shared = (m.d_model * gated * shared_ff + shared_ff * m.d_model + ((gated * shared_ff + m.d_model) if m.bias else 0)
              + (m.d_model if config.shared_gate else 0)) if shared_ff else 0
    router = config.n_experts * (m.d_model + int(config.router_bias))
    return router + config.n_experts * dense + shared


def mla_parameters(spec: blockspec.ModelSpec) -> int:
    """blockspec-attention's mla: the queries (d -> h·(nope + hs), or through a q_lora_rank bottleneck with its
    norm), kv_down (d -> r + hs) and its norm, kv_up (r -> h·(nope + v)), proj (h·v -> d); [model] bias on
    q_down, kv_down and proj."""
    m, c = spec.model, spec.attention.config
    h, hs, bias = m.n_heads, m.head_dim, int(m.bias)
    width = h * (c.nope_head_dim + hs)
    queries = m.d_model * width if c.q_lora_rank is None else \
        (m.d_model + bias + 1) * c.q_lora_rank + c.q_lora_rank * width
    latent = m.d_model * (c.kv_lora_rank + hs) + bias * (c.kv_lora_rank + hs) + c.kv_lora_rank
    expand = c.kv_lora_rank * h * (c.nope_head_dim + c.v_head_dim)
    return queries + latent + expand + h * c.v_head_dim * m.d_model + bias * m.d_model


def closed_form(spec: blockspec.ModelSpec) -> int:
    """The exact parameter count of a first-party spec, from sizes alone."""
    m = spec.model
    positional = m.context_length * m.d_model if spec.positional.name == "learned" else 0
    norm_config = spec.norm.config
    norm = (layernorm_parameters(m, affine=norm_config.elementwise_affine, bias=norm_config.bias)
            if spec.norm.name == "layernorm" else m.d_model)
    head_config = spec.head.config
    if spec.head.name == "lm":
        head = (0 if head_config.tied else m.vocab_size * m.d_model) + (m.vocab_size if head_config.bias else 0)
    else:
        head = (m.d_model + int(head_config.bias)) * head_config.n_classes
    ffn = moe_parameters(spec) if spec.ffn.name == "moe" else None
    if spec.attention.name == "mla":
        attention = mla_parameters(spec)
    else:
        causal = spec.attention.config  # the built-in attention's options
        attention = attention_parameters(m, qkv_bias=causal.qkv_bias, out_bias=causal.out_bias,
                                         qk_norm=causal.qk_norm, sinks=causal.sinks)
    return model_parameters(m, positional=positional, norm=norm, attention=attention,
                            head=head, gated=spec.activation.name in GATED, ffn=ffn, norms=block_norms(spec))


@settings(max_examples=15)
@given(st.data())
def test_exact_count_equals_meta_count_and_closed_form(registry, data):
    spec = data.draw(model_specs(registry, where=_first_party))
    built = blockspec.build(spec, registry=registry, seed=0)
    real = sum(p.numel() for p in built.parameters())
    assert blockspec.count_parameters(spec, registry).exact == real == closed_form(spec)


@settings(max_examples=15)
@given(st.data())
def test_specs_round_trip_through_toml(registry, data):
    spec = data.draw(model_specs(registry, where=_first_party))
    assert blockspec.loads_spec(blockspec.dump_spec(spec), registry) == spec


def _lm_first_party(component) -> bool:
    return _first_party(component) and (component.kind != "head" or "lm" in component.promises)


@settings(max_examples=15)
@given(st.data())
def test_models_are_causal_and_keep_every_tensor_n_by_d(registry, data):
    spec = data.draw(model_specs(registry, where=_lm_first_party))
    ids = data.draw(token_batches(spec.model.vocab_size, max_tokens=spec.model.context_length))
    cut = data.draw(st.integers(0, ids.shape[1] - 1))
    model = blockspec.build(spec, registry=registry, seed=1).eval()
    shapes = []
    hooks = [m.register_forward_hook(lambda _m, _i, out: shapes.append(tuple(out.shape)))
             for m in (model.embedding, *model.blocks, model.final_norm)]
    changed = ids.clone()
    changed[:, cut + 1:] = (ids[:, cut + 1:] + 1) % spec.model.vocab_size  # (B, N)
    with torch.no_grad():
        before, after = model(ids), model(changed)
    for hook in hooks:
        hook.remove()
    assert set(shapes) == {(*ids.shape, spec.model.d_model)}
    assert before.shape == (*ids.shape, spec.model.vocab_size)
    assert torch.allclose(before[:, : cut + 1], after[:, : cut + 1], atol=1e-5)
