"""blockspec.inspect.trace: the stages of one forward pass, their names, shapes and makers."""

from __future__ import annotations

import types

import pytest
import torch
from attrs import frozen
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import blockspec
from blockspec.modules.positional import PositionalEncoding
from blockspec.inspect.plots import SECTION_COLOURS
from blockspec.inspect.trace import FFN, MODEL, NORM, POSITIONS, RESIDUAL, TraceError, section_label, trace

SMALL = {"name": "small", "vocab_size": 40, "context_length": 16, "d_model": 16, "n_layers": 2,
         "n_heads": 4, "d_ff": 24, "bias": True, "norm_placement": "pre", "dropout": 0.0}


def small_spec(registry, *, model=None, positional=None, norm=None, activation=None, head=None):
    data = {
        "model": {**SMALL, **(model or {})},
        "positional": positional or {"use": "learned"},
        "norm": norm or {"use": "layernorm"},
        "activation": activation or {"use": "gelu"},
        "head": head or {"use": "lm", "tied": True},
    }
    return blockspec.structure_spec(data, registry)


def small_model(registry, seed: int = 0, **parts) -> blockspec.Transformer:
    return blockspec.build(small_spec(registry, **parts), registry=registry, seed=seed).eval()


def ids_of(n_tokens: int, batch: int = 1, vocab: int = 40, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, n_tokens), generator=torch.Generator().manual_seed(seed))


def block_stages(index: int, *, post: bool = False, rotary: bool = False, bias: bool = False) -> list[str]:
    p = f"blocks.{index}"
    attn = [f"{p}.attn.{s}" for s in ("q", "k", "v")]
    attn += [f"{p}.attn.q_rotated", f"{p}.attn.k_rotated"] if rotary else []
    attn += [f"{p}.attn.score_bias"] if bias else []
    attn += [f"{p}.attn.{s}" for s in ("weights", "heads", "out")]
    ffn = [f"{p}.ffn.up", f"{p}.ffn.act", f"{p}.ffn.down"]
    if post:
        return [*attn, f"{p}.attn_residual", f"{p}.norm1", *ffn, f"{p}.ffn_residual", f"{p}.norm2"]
    return [f"{p}.norm1", *attn, f"{p}.attn_residual", f"{p}.norm2", *ffn, f"{p}.ffn_residual"]


# -- the chapter's model ------------------------------------------------------------------------------


def test_tiny_shakespeare_stages_and_shapes(example_spec, registry):
    model = blockspec.build(example_spec("tiny-shakespeare"), registry=registry, seed=0).eval()
    result = trace(model, ids_of(5, vocab=65))
    expected = ["tokens", "embedding", "positional.encoding", "positional.embed",
                *block_stages(0), *block_stages(1), "final_norm", "logits", "probs"]
    assert result.names() == expected
    shapes = {s.name: s.shape for s in result}
    assert shapes["tokens"] == (5,)
    assert shapes["embedding"] == shapes["positional.embed"] == shapes["blocks.1.ffn_residual"] == (5, 64)
    assert shapes["blocks.0.attn.weights"] == (4, 5, 5)
    assert shapes["blocks.0.attn.q"] == shapes["blocks.0.attn.heads"] == (4, 5, 16)
    assert shapes["blocks.0.ffn.act"] == (5, 256)
    assert shapes["logits"] == shapes["probs"] == (5, 65)


def test_stages_name_their_component_distribution_and_section(example_spec, registry):
    model = blockspec.build(example_spec("tiny-shakespeare"), registry=registry, seed=0).eval()
    result = trace(model, ids_of(3, vocab=65))
    norm, act, pos = result["blocks.0.norm1"], result["blocks.1.ffn.act"], result["positional.embed"]
    assert (norm.component, norm.distribution, norm.section) == ("norm:layernorm", "blockspec-norms", NORM)
    assert (act.component, act.distribution) == ("activation:gelu", "blockspec-activations")
    assert (pos.component, pos.section) == ("positional:learned", POSITIONS)
    assert result["logits"].component == "head:lm"
    assert result["blocks.0.attn.weights"].component == "attention:causal"
    residual = result["blocks.0.attn_residual"]  # the block component wires the residual adds
    assert (residual.component, residual.distribution, residual.section) == ("block:pre", "blockspec", RESIDUAL)
    up = result["blocks.0.ffn.up"]  # the FFN component's own linears
    assert (up.component, up.distribution, up.section) == ("ffn:dense", "blockspec", FFN)


# -- wiring variants -----------------------------------------------------------------------------------


def test_post_norm_stages_are_add_then_norm(registry):
    model = small_model(registry, model={"norm_placement": "post"}, positional={"use": "sinusoidal"},
                        activation={"use": "relu"})
    result = trace(model, ids_of(6))
    assert result.names() == ["tokens", "embedding", "positional.encoding", "positional.embed",
                              *block_stages(0, post=True), *block_stages(1, post=True), "logits", "probs"]
    assert "add & norm" in result["blocks.0.norm1"].op
    assert result["blocks.1.norm2"].shape == (6, 16)


def test_rope_and_grouped_query_attention(registry):
    model = small_model(registry, model={"n_kv_heads": 2, "bias": False}, positional={"use": "rope"},
                        norm={"use": "rmsnorm"}, activation={"use": "swiglu"}, head={"use": "lm", "tied": False})
    result = trace(model, ids_of(7))
    assert result.names() == ["tokens", "embedding", *block_stages(0, rotary=True), *block_stages(1, rotary=True),
                              "final_norm", "logits", "probs"]
    shapes = {s.name: s.shape for s in result}
    assert shapes["blocks.0.attn.q"] == shapes["blocks.0.attn.q_rotated"] == (4, 7, 4)
    assert shapes["blocks.0.attn.k"] == shapes["blocks.0.attn.k_rotated"] == shapes["blocks.0.attn.v"] == (2, 7, 4)
    assert shapes["blocks.0.attn.weights"] == (4, 7, 7)
    assert shapes["blocks.0.ffn.up"] == (7, 48) and shapes["blocks.0.ffn.act"] == (7, 24)
    rotated = result["blocks.0.attn.q_rotated"]
    assert (rotated.component, rotated.section) == ("positional:rope", POSITIONS)
    assert torch.equal(rotated.tensor[:, :, 0], result["blocks.0.attn.q"].tensor[:, :, 0])  # position 0: no turn
    assert not torch.equal(rotated.tensor[:, :, 1:], result["blocks.0.attn.q"].tensor[:, :, 1:])


# -- a third party's components ------------------------------------------------------------------------


@frozen(kw_only=True)
class SlopeConfig:
    """ALiBi-like: a linear penalty on the distance to each key."""

    slope: float = 0.5


@frozen(kw_only=True)
class ScaleNormConfig:
    """ScaleNorm: g * sqrt(d) * x / ||x||."""


class DistancePenalty(PositionalEncoding):
    biases = True

    def __init__(self, n_heads: int, slope: float) -> None:
        super().__init__(max_positions=None)
        self.register_buffer("slopes", slope / torch.arange(1, n_heads + 1, dtype=torch.float32), persistent=False)

    def score_bias(self, n_q: int, n_k: int, start: int = 0) -> torch.Tensor:
        distance = torch.arange(n_k)[None, :] - torch.arange(n_k - n_q, n_k)[:, None]  # (n_q, n_k)
        return self.slopes[:, None, None] * distance.clamp(max=0)  # (h, n_q, n_k)


class ScaleNorm(nn.Module):
    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(()))
        self.scale = d_model**0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gain * self.scale * x / x.norm(dim=-1, keepdim=True).clamp_min(1e-6)


def third_party_plugin() -> types.ModuleType:
    plugin = types.ModuleType("test_third_party_plugin")

    @blockspec.hookimpl
    def blockspec_register(register):
        register("positional", "distance", SlopeConfig, lambda c, ctx: DistancePenalty(ctx.model.n_heads, c.slope),
                 promises=("score_bias", "relative"))
        register("norm", "scalenorm", ScaleNormConfig, lambda c, ctx: ScaleNorm(ctx.model.d_model),
                 promises=("scale_invariant",))

    plugin.blockspec_register = blockspec_register
    return plugin


@pytest.fixture(scope="module")
def third_party_registry():
    return blockspec.load_registry(plugins=[(third_party_plugin(), "test-dist", "0.0")])


def test_third_party_components_are_traced(third_party_registry):
    model = small_model(third_party_registry, positional={"use": "distance", "slope": 1.0},
                        norm={"use": "test-dist:scalenorm"})  # blockspec-extras also provides one
    ids = ids_of(5)
    result = trace(model, ids)
    assert result.names() == ["tokens", "embedding", *block_stages(0, bias=True), *block_stages(1, bias=True),
                              "final_norm", "logits", "probs"]
    bias = result["blocks.0.attn.score_bias"]
    assert (bias.component, bias.distribution, bias.shape) == ("positional:distance", "test-dist", (4, 5, 5))
    norm = result["blocks.1.norm2"]
    assert (norm.component, norm.distribution, norm.op) == ("norm:scalenorm", "test-dist", "ScaleNorm(x): FFN input norm")
    assert torch.equal(result.output, model(ids))


class Wrapped(nn.Module):
    """A block class the tracer does not know."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x, positional, start=0):
        return self.inner(x, positional, start) * 0.5


def test_unknown_block_is_one_stage(registry):
    model = small_model(registry)
    model.blocks[0] = Wrapped(model.blocks[0])
    ids = ids_of(4)
    result = trace(model, ids)
    assert result.names()[4:6] == ["blocks.0", "blocks.1.norm1"]
    assert "whole block" in result["blocks.0"].op and result["blocks.0"].shape == (4, 16)
    assert torch.equal(result.output, model(ids))


# -- tracing does not change the model or its output ----------------------------------------------------

VARIANTS = {
    "pre-ln learned": {},
    "post-ln sinusoidal": {"model": {"norm_placement": "post"}, "positional": {"use": "sinusoidal"}},
    "rope gqa swiglu": {"model": {"n_kv_heads": 1}, "positional": {"use": "rope", "layout": "interleaved"},
                        "norm": {"use": "rmsnorm"}, "activation": {"use": "swiglu"}},
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_traced_output_is_the_models_output_exactly(registry, variant):
    model = small_model(registry, **VARIANTS[variant])
    ids = ids_of(9, batch=3)
    result = trace(model, ids)
    assert torch.equal(result.output, model(ids))
    assert torch.equal(result["probs"].tensor, model(ids).softmax(dim=-1))


def test_same_output_with_dropout_in_training_mode(registry):
    """The tracer draws dropout masks in the forward pass's order, so even training mode matches."""
    model = small_model(registry, model={"dropout": 0.3}).train()
    ids = ids_of(6, batch=2)
    torch.manual_seed(7)
    traced = trace(model, ids).output
    torch.manual_seed(7)
    assert torch.equal(traced, model(ids))
    assert model.training


def test_nothing_is_left_on_the_model(registry):
    model = small_model(registry)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trace(model, ids_of(5))
    for module in model.modules():
        assert not (module._forward_hooks or module._forward_pre_hooks or module._backward_hooks)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not model.training


@given(n_tokens=st.integers(1, 16), seed=st.integers(0, 2**16), start=st.integers(0, 8))
def test_every_head_sees_only_the_past(registry_small, n_tokens, seed, start):
    ids = ids_of(n_tokens, seed=seed)
    result = trace(registry_small, ids, start=start)
    assert torch.equal(result.output, registry_small(ids, start=start))
    for weights in result.select("blocks.*.attn.weights").values():
        rows = weights[0]  # (h, N, N)
        assert torch.equal(rows[:, 0], torch.eye(n_tokens)[0].expand(rows.shape[0], n_tokens))  # first row [1, 0..]
        assert torch.all(rows.triu(diagonal=1) == 0)
        assert torch.allclose(rows.sum(-1), torch.ones(rows.shape[:2]))


@pytest.fixture(scope="module")
def registry_small():
    return small_model(blockspec.load_registry(), positional={"use": "rope"})


# -- selecting stages ------------------------------------------------------------------------------------


def test_select_by_pattern_keeps_stage_order(registry):
    model = small_model(registry)
    result = trace(model, ids_of(3))
    weights = result.select("blocks.*.attn.weights")
    assert list(weights) == ["blocks.0.attn.weights", "blocks.1.attn.weights"]
    assert weights["blocks.1.attn.weights"] is result["blocks.1.attn.weights"].tensor
    assert list(result.select("blocks.1.ffn.*")) == ["blocks.1.ffn.up", "blocks.1.ffn.act", "blocks.1.ffn.down"]
    assert result.select("no.such.*") == {}
    assert [s.section for s in result][0] == MODEL


def test_bad_inputs_are_clear_errors(registry):
    model = small_model(registry)
    result = trace(model, ids_of(3))
    with pytest.raises(TraceError, match="no stage named 'blocks.9.norm1'"):
        result["blocks.9.norm1"]
    with pytest.raises(TraceError, match=r"expected token ids of shape \(B, N\), found shape \(3,\)"):
        trace(model, torch.tensor([1, 2, 3]))
    with pytest.raises(blockspec.ContextLengthError, match="positions up to 16"):
        trace(model, ids_of(17))


def test_blockspec_trace_is_callable_before_and_after_import(registry):
    import importlib

    model = small_model(registry)
    ids = ids_of(2)
    assert blockspec.trace(model, ids).names()[0] == "tokens"
    module = importlib.import_module("blockspec.inspect.trace")
    assert blockspec.trace is module and module(model, ids).names() == trace(model, ids).names()
    assert blockspec.Trace is module.Trace and blockspec.Stage is module.Stage


# -- section labels and op texts say what the model has -------------------------------------------------


def test_a_norm_section_names_the_norm_unless_it_is_the_chapters_layernorm(example_spec, registry):
    layernorm = trace(blockspec.build(example_spec("tiny-shakespeare"), registry=registry, seed=0).eval(), ids_of(3))
    assert {layernorm[n].section for n in ("blocks.0.norm1", "blocks.1.norm2", "final_norm")} == {"7.3 LayerNorm"}
    rms = trace(small_model(registry, positional={"use": "rope"}, norm={"use": "rmsnorm"}), ids_of(4))
    assert {rms[n].section for n in ("blocks.0.norm1", "blocks.1.norm2", "final_norm")} == {"7.3 norm (rmsnorm)"}
    # the sections whose titles name no one component stay as the chapter titles them
    assert {s.section for s in rms} == {"7.1 positions", "7.2 residual", "7.3 norm (rmsnorm)", "7.4 FFN",
                                        "7.5 output layer", "7.6 the full model"}
    assert rms["blocks.0.norm1"].chapter == "7.3" and rms["blocks.0.attn_residual"].chapter == "7.2"
    assert all(stage.chapter in SECTION_COLOURS for stage in rms)  # the overview plot colours by number


def test_section_labels_follow_one_rule():
    assert section_label(NORM, "norm:layernorm") == "7.3 LayerNorm"
    assert section_label(NORM, "norm:scalenorm") == "7.3 norm (scalenorm)"
    assert section_label(POSITIONS, "positional:rope") == POSITIONS  # "positions" names no one encoder
    assert section_label(RESIDUAL, None) == RESIDUAL


def test_attention_weights_op_says_when_a_score_bias_was_added(registry):
    from blockspec_extras.alibi import alibi_slopes  # noqa: F401  (blockspec-extras is installed)

    alibi = trace(small_model(registry, positional={"use": "alibi"}), ids_of(5))
    assert alibi["blocks.0.attn.weights"].op.startswith("softmax(q·kᵀ/√hs + bias + mask)")
    assert alibi["blocks.0.attn.score_bias"].component == "positional:alibi"
    assert alibi["blocks.0.attn.score_bias"].distribution == "blockspec-extras"
    learned = trace(small_model(registry), ids_of(5))
    assert learned["blocks.0.attn.weights"].op.startswith("softmax(q·kᵀ/√hs + mask)")
    assert "bias" not in learned["blocks.0.attn.weights"].op
