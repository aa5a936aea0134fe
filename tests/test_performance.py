"""What the speed work relies on, checked as behaviour, never as time (timings live in benchmarks/)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import blockspec
from blockspec_positional.rope import RotaryPositions, rotary_angles

from .specs import spec_text



def tiny(registry, *, dropout=0.0, placement="pre", positional="learned", seed=0):
    spec = blockspec.loads_spec(tiny_text(dropout=dropout, placement=placement, positional=positional), registry)
    return blockspec.build(spec, registry=registry, seed=seed)


def tiny_text(*, dropout: float, placement: str, positional: str) -> str:
    return spec_text(vocab_size=50, context_length=16, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=32,
                     dropout=dropout, norm_placement=placement, positional=positional)


def dropout_calls(model: torch.nn.Module, ids: torch.Tensor) -> int:
    calls = []
    hooks = [m.register_forward_hook(lambda *_: calls.append(1))
             for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    model(ids)
    for hook in hooks:
        hook.remove()
    return len(calls)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_dropout_off_is_never_called(registry, placement):
    model = tiny(registry, placement=placement).train()
    assert dropout_calls(model, torch.randint(0, 50, (2, 8))) == 0


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_dropout_on_still_drops_in_training(registry, placement):
    model = tiny(registry, dropout=0.5, placement=placement)
    ids = torch.randint(0, 50, (2, 8))
    assert dropout_calls(model.train(), ids) == 1 + 2 * 2  # embedding + two per block
    torch.manual_seed(1)
    first = model(ids)
    assert not torch.equal(first, model(ids))  # fresh masks each call
    model.eval()
    assert torch.equal(model(ids), model(ids))


def pairwise_rotation(x: torch.Tensor, angles: torch.Tensor, layout: str) -> torch.Tensor:
    """The textbook rotation of each feature pair by its angle, written out pair by pair (float64)."""
    x = x.double()
    half = x.shape[-1] // 2
    out = torch.empty_like(x)
    for i in range(half):
        a, b = (i, i + half) if layout == "half" else (2 * i, 2 * i + 1)
        cos, sin = angles[:, i].cos(), angles[:, i].sin()
        out[..., a] = x[..., a] * cos - x[..., b] * sin
        out[..., b] = x[..., a] * sin + x[..., b] * cos
    return out


@given(layout=st.sampled_from(["half", "interleaved"]), start=st.integers(0, 40),
       n=st.integers(1, 12), context=st.sampled_from([4, 64]))
def test_rope_rotates_each_pair_by_its_angle_and_keeps_the_layout(layout, start, n, context):
    rope = RotaryPositions(8, context, layout=layout)
    q = torch.randn(2, n, 4, 8).transpose(1, 2)  # (B, h, N, hs) view of (B, N, h, hs), as attention makes it
    k = torch.randn(2, n, 2, 8).transpose(1, 2)  # (B, kv, N, hs)
    rq, rk = rope.rotate(q, k, start)
    angles = rotary_angles(n, 8, start=start)
    torch.testing.assert_close(rq.double(), pairwise_rotation(q, angles, layout), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rk.double(), pairwise_rotation(k, angles, layout), atol=1e-5, rtol=1e-5)
    assert rq.transpose(1, 2).is_contiguous() and rk.transpose(1, 2).is_contiguous()  # still (B, N, h, hs) memory


def test_rope_tables_are_buffers_not_state(registry):
    model = tiny(registry, positional="rope")
    buffers = dict(model.named_buffers())
    assert {"positional.cos_full", "positional.sin_full"} <= set(buffers)
    assert not any(name.startswith("positional.") for name in model.state_dict())


def test_rope_attention_output_needs_no_copy(registry):
    """q keeps (B, N, h, hs) memory after rotation, so SDPA's output reshapes to (B, N, d) as a view."""
    model = tiny(registry, positional="rope").eval()
    attn = model.blocks[0].attn
    x = torch.randn(2, 8, 16)
    q, k, v = attn.project(x, model.positional)
    y = attn.attend(q, k, v, None).transpose(1, 2)  # (B, N, h, hs)
    assert y.is_contiguous()


def test_seeded_build_leaves_the_global_generator_alone(registry):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    first = tiny(registry, seed=7)
    assert torch.equal(torch.rand(3), expected)
    second = tiny(registry, seed=7)
    for (name, a), b in zip(first.state_dict().items(), second.state_dict().values()):
        assert torch.equal(a, b), name


def test_build_on_meta_and_on_the_default_device(registry):
    spec = blockspec.loads_spec(tiny_text(dropout=0.0, placement="pre", positional="rope"), registry)
    meta = blockspec.build(spec, registry=registry, device="meta")
    assert all(p.is_meta for p in meta.parameters())
    cpu = blockspec.build(spec, registry=registry, device=torch.device("cpu"), seed=0)
    assert all(p.device.type == "cpu" for p in cpu.parameters())


def test_registry_loads_without_torch():
    code = "import sys, blockspec; blockspec.load_registry(); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
