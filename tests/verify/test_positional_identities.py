"""The identities behind the positional promises, stated exactly for the first-party encoders."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import blockspec
from blockspec_positional.rope import RotaryPositions
from blockspec_positional.sinusoidal import frequencies, sinusoidal_table


def rotation(angle: torch.Tensor) -> torch.Tensor:
    """R(a) = [[cos a, sin a], [-sin a, cos a]] as the chapter writes it, (..., 2, 2)."""
    cos, sin = angle.cos(), angle.sin()
    return torch.stack((torch.stack((cos, sin), -1), torch.stack((-sin, cos), -1)), -2)


@given(d_half=st.integers(1, 64), pos=st.integers(0, 5000), k=st.integers(0, 500), data=st.data())
def test_sinusoidal_shift_is_a_rotation_of_each_pair(d_half, pos, k, data):
    """[PE(pos+k, 2i), PE(pos+k, 2i+1)] = R(ω_i k) [PE(pos, 2i), PE(pos, 2i+1)], for every pos."""
    d = 2 * d_half
    i = data.draw(st.integers(0, d_half - 1))
    table = sinusoidal_table(pos + k + 1, d).double()  # (pos + k + 1, d)
    here, there = table[pos, 2 * i: 2 * i + 2], table[pos + k, 2 * i: 2 * i + 2]
    turned = rotation(frequencies(d)[i] * k) @ here
    assert torch.allclose(turned, there, atol=2e-6)  # float32 table entries, rotation in float64


@given(head_dim=st.sampled_from([2, 4, 8, 64]), m=st.integers(0, 3000), n=st.integers(0, 3000),
       shift=st.integers(0, 3000), layout=st.sampled_from(["half", "interleaved"]), seed=st.integers(0, 99))
def test_rope_scores_depend_only_on_the_offset_and_rotation_keeps_length(head_dim, m, n, shift, layout, seed):
    rope = RotaryPositions(head_dim, 16, layout=layout)
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 1, 1, 1, head_dim, generator=gen, dtype=torch.float32)  # (1, 1, 1, hs) each

    def score(p_q: int, p_k: int) -> torch.Tensor:
        rq, _ = rope.rotate(q, q, p_q)
        _, rk = rope.rotate(k, k, p_k)
        return (rq * rk).sum()

    assert torch.allclose(score(m, n), score(m + shift, n + shift), atol=2e-3 * head_dim ** 0.5, rtol=1e-3)
    rq, _ = rope.rotate(q, q, m)
    assert torch.allclose(rq.norm(), q.norm(), rtol=1e-5)


def test_learned_positions_past_the_table_raise_the_librarys_error(example_spec, registry):
    spec = example_spec("tiny-shakespeare")
    model = blockspec.build(spec, registry=registry, seed=0)
    context = spec.model.context_length
    model(torch.zeros(1, context, dtype=torch.long))  # the last position in the table works
    with pytest.raises(blockspec.ContextLengthError, match=f"positions up to {context} requested"):
        model(torch.zeros(1, context + 1, dtype=torch.long))
    with pytest.raises(blockspec.ContextLengthError):
        model(torch.zeros(1, 1, dtype=torch.long), start=context)


def test_sinusoidal_and_rope_work_far_past_the_context(registry):
    for use in ("sinusoidal", "rope"):
        spec = blockspec.loads_spec(
            "[model]\nvocab_size = 10\ncontext_length = 8\nd_model = 16\nn_layers = 1\nn_heads = 2\nd_ff = 32\n"
            f'[positional]\nuse = "{use}"\n[norm]\nuse = "layernorm"\n[activation]\nuse = "gelu"\n'
            '[head]\nuse = "lm"\n', registry)
        model = blockspec.build(spec, registry=registry, seed=0)
        with torch.no_grad():
            out = model(torch.zeros(1, 4, dtype=torch.long), start=10_000)
        assert math.isfinite(out.abs().max().item())
