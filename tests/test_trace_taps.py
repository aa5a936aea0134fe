"""Taps: a module's own stages reach the tracer with no change to the tracer, and cost nothing otherwise."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from blockspec.inspect.trace import FFN, RESIDUAL, trace
from blockspec.modules import taps
from blockspec.plugin import tap
from tests.test_trace import ids_of, small_model, third_party_registry  # noqa: F401 (fixture)


class ParallelBlock(nn.Module):
    """A block layout the core does not have: x + attn(norm(x)) + ffn(norm(x)), one norm shared."""

    tap_ops = {"parallel_residual": "x + attn(norm(x)) + ffn(norm(x)): parallel residual"}

    def __init__(self, block: nn.Module, *, tapped: bool = True) -> None:
        super().__init__()
        self.norm, self.attn, self.ffn = block.norm1, block.attn, block.ffn
        self.tapped = tapped

    def forward(self, x: torch.Tensor, positional: nn.Module, start: int = 0) -> torch.Tensor:
        show = tap if self.tapped else (lambda _module, _name, tensor: tensor)
        h = show(self, "norm", self.norm(x))
        a = show(self, "attn", self.attn(h, positional, start))
        f = show(self, "ffn", self.ffn(h))
        return show(self, "parallel_residual", x + a + f)


class PlainFFN(nn.Module):
    """A plugin FFN without taps: one stage."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.inner = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.inner(x))


def test_a_new_block_layout_with_taps_shows_its_inner_stages(registry):
    model = small_model(registry)
    model.blocks[0] = ParallelBlock(model.blocks[0])
    del model.provenance["blocks.0"]  # no registry component made the swapped-in block: credited to nobody
    ids = ids_of(5)
    result = trace(model, ids)
    attn = [f"blocks.0.attn.{s}" for s in ("q", "k", "v", "weights", "heads", "out")]
    ffn = [f"blocks.0.ffn.{s}" for s in ("up", "act", "down")]
    names = result.names()
    block = names[names.index("positional.embed") + 1:names.index("blocks.1.norm1")]
    assert block == ["blocks.0.norm", *attn, *ffn, "blocks.0.parallel_residual"]
    mixed = result["blocks.0.parallel_residual"]
    assert (mixed.op, mixed.section, mixed.distribution) == (
        "x + attn(norm(x)) + ffn(norm(x)): parallel residual", RESIDUAL, None)
    assert result["blocks.0.ffn.up"].section == FFN
    assert "blocks.0.attn" not in result.names()  # the attention's own stages stand for it
    assert torch.equal(result.output, model(ids))


def test_a_block_without_taps_is_one_stage_even_around_tapped_modules(registry):
    model = small_model(registry)
    model.blocks[1] = ParallelBlock(model.blocks[1], tapped=False)
    result = trace(model, ids_of(4))
    names = result.names()
    assert names[names.index("blocks.0.ffn_residual") + 1:] == ["blocks.1", "final_norm", "logits", "probs"]
    assert result["blocks.1"].op == "ParallelBlock: whole block (not traced inside)"


def test_a_plugin_ffn_without_taps_is_one_stage(registry):
    model = small_model(registry)
    model.blocks[0].ffn = PlainFFN(16)
    del model.provenance["blocks.0.ffn"]  # no registry component made the swapped-in FFN: credited to nobody
    result = trace(model, ids_of(3))
    names = result.names()
    assert names[names.index("blocks.0.norm2") + 1:names.index("blocks.0.ffn_residual")] == ["blocks.0.ffn"]
    stage = result["blocks.0.ffn"]
    assert (stage.op, stage.section, stage.distribution) == ("PlainFFN: whole FFN (not traced inside)", FFN, None)


def test_weights_use_the_forwards_q_and_k_with_score_bias_and_mask(third_party_registry):  # noqa: F811
    model = small_model(third_party_registry, positional={"use": "distance", "slope": 1.0})
    result = trace(model, ids_of(6, batch=2))
    q, k, v = (result[f"blocks.0.attn.{s}"].tensor for s in ("q", "k", "v"))
    bias = result["blocks.0.attn.score_bias"].tensor  # (B, h, N, N)
    mask = torch.full((6, 6), float("-inf")).triu(diagonal=1)
    expected = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + bias + mask).softmax(dim=-1)  # (B, h, N, N)
    weights = result["blocks.0.attn.weights"].tensor
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(weights @ v, result["blocks.0.attn.heads"].tensor, atol=1e-5, rtol=1e-5)
    assert weights[0, 0, -1, 0] < weights[0, 0, -1, -1]  # the bias penalises distant keys


def test_tap_is_the_identity_and_no_recorder_outlives_a_trace(registry):
    x = torch.ones(2)
    assert tap(nn.Identity(), "x", x) is x and not taps.tapping()
    seen: list[str] = []
    with taps.recording(lambda _m, name, _t: seen.append(name)):
        with pytest.raises(RuntimeError):
            with taps.recording(lambda *_: None):
                raise RuntimeError
        assert tap(nn.Identity(), "kept", x) is x
    assert seen == ["kept"] and taps._recorder is None
    trace(small_model(registry), ids_of(2))
    assert taps._recorder is None
