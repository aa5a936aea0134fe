"""Runtime guards: positions past a learned table fail before any kernel runs; NaN/Inf are traced to their maker."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import blockspec
from blockspec import ContextLengthError, NonFiniteError, loads_spec
from blockspec.inspect.debug import check_finite
from .specs import spec_text

CONTEXT = 8
TINY = spec_text(name="tiny", vocab_size=17, context_length=CONTEXT, d_model=8, n_layers=2, n_heads=2, d_ff=16)


class KernelLog(TorchDispatchMode):
    """Records every aten operator that runs: what 'a kernel ran' means here."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def model(registry) -> blockspec.Transformer:
    return blockspec.build(loads_spec(TINY, registry), registry=registry, seed=0).eval()


def build(registry, text: str = TINY) -> blockspec.Transformer:
    return blockspec.build(loads_spec(text, registry), registry=registry, seed=0).eval()


def ids(n: int) -> torch.Tensor:
    return torch.zeros(1, n, dtype=torch.long)


@pytest.mark.parametrize(("n_tokens", "start"), [(CONTEXT + 1, 0), (2, CONTEXT - 1), (1, CONTEXT), (3, 10**9)],
                         ids=["too-long", "cache-position-past-table", "first-position-past", "far-past"])
def test_positions_past_a_learned_table_fail_before_any_kernel(model, n_tokens, start):
    log, tokens = KernelLog(), ids(n_tokens)
    with torch.no_grad(), log, pytest.raises(ContextLengthError) as caught:
        model(tokens, start=start)
    assert log.ops == [], f"kernels ran before the error: {log.ops[:5]}"
    assert f"positions up to {start + n_tokens - 1}" in str(caught.value) and f"0..{CONTEXT - 1}" in str(caught.value)


def kv_cache_class():
    """The training issue's KV cache, once it is on this branch; the tests below skip until then."""
    cache_class = getattr(blockspec, "KVCache", None)
    if cache_class is None:
        pytest.skip("blockspec.KVCache is not on this branch yet (the training issue adds it)")
    return cache_class


@pytest.mark.parametrize("cache_length", [CONTEXT + 4, CONTEXT])
def test_a_kv_cache_step_past_the_learned_table_fails_before_any_kernel(model, cache_length):
    cache = kv_cache_class().for_model(model, batch_size=1, max_length=cache_length)
    with torch.no_grad():
        model(ids(CONTEXT), cache=cache)  # the prompt fills every learned position
    log, token = KernelLog(), ids(1)
    with torch.no_grad(), log, pytest.raises(ContextLengthError) as caught:
        model(token, start=CONTEXT, cache=cache)
    assert log.ops == [], f"kernels ran before the error: {log.ops[:5]}"
    assert f"positions up to {CONTEXT}" in str(caught.value)
    assert cache.length == CONTEXT  # the refused step left the cache as it was


def test_the_kernel_log_does_see_a_forward_pass(model):
    log, tokens = KernelLog(), ids(CONTEXT)
    with torch.no_grad(), log:
        model(tokens)
    assert any("embedding" in op for op in log.ops)


@given(start=st.integers(0, 3 * CONTEXT), n_tokens=st.integers(1, CONTEXT + 2))
def test_the_guard_fires_exactly_past_the_table(model, start, n_tokens):
    fits = start + n_tokens <= CONTEXT
    with torch.no_grad():
        if fits:
            assert model(ids(n_tokens), start=start).shape == (1, n_tokens, 17)
        else:
            with pytest.raises(ContextLengthError):
                model(ids(n_tokens), start=start)


@pytest.mark.parametrize("use", ["sinusoidal", "rope"])
def test_unbounded_encoders_take_any_position(registry, use):
    model = build(registry, TINY.replace('use = "learned"', f'use = "{use}"'))
    with torch.no_grad():
        assert model(ids(3), start=10 * CONTEXT).shape == (1, 3, 17)


# ---------------------------------------------------------------- finiteness


def poison(tensor: torch.Tensor, value: float = float("nan")) -> None:
    with torch.no_grad():
        tensor.view(-1)[0] = value


def blamed(model: nn.Module, *, start: int = 0) -> NonFiniteError:
    with check_finite(model), torch.no_grad(), pytest.raises(NonFiniteError) as caught:
        model(ids(4), start=start)
    return caught.value


def test_a_finite_forward_passes_and_leaves_no_hooks(registry):
    model = build(registry)
    expected = model(ids(4))
    with check_finite(model), torch.no_grad():
        assert torch.equal(model(ids(4)), expected)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert "embed" not in vars(model.positional)


@pytest.mark.parametrize(("target", "module_path", "spec_path"), [
    ("embedding.weight", "embedding", "$.model"),
    ("positional.table.weight", "positional", "$.positional"),
    ("blocks.0.norm1.weight", "blocks.0.norm1", "$.norm"),
    ("blocks.1.attn.qkv.weight", "blocks.1.attn.qkv", "$.attention"),
    ("blocks.1.ffn.up.weight", "blocks.1.ffn.up", "$.ffn"),  # the FFN component made it
    ("final_norm.bias", "final_norm", "$.norm"),
])
def test_the_first_non_finite_value_is_blamed_on_its_module_and_spec_table(registry, target, module_path, spec_path):
    model = build(registry)
    poison(model.get_parameter(target))
    error = blamed(model)
    assert (error.module_path, error.spec_path) == (module_path, spec_path), str(error)
    assert module_path in str(error) and "NaN" in str(error)
    assert all(not m._forward_hooks for m in model.modules())  # removed even though the pass raised


def test_a_broken_activation_is_named_by_its_spec_table(registry):
    model = build(registry)
    model.blocks[1].ffn.act.forward = lambda x: x / 0.0 - x / 0.0  # inf - inf = NaN, from finite inputs
    error = blamed(model)
    assert (error.module_path, error.spec_path) == ("blocks.1.ffn.act", "$.activation")
    assert "activation 'blockspec-activations:gelu'" in str(error) and "from finite inputs" in str(error)


def test_the_earliest_of_two_faults_is_blamed(registry):
    model = build(registry)
    poison(model.get_parameter("blocks.1.norm1.weight"), float("inf"))
    poison(model.get_parameter("blocks.0.norm2.weight"))
    assert blamed(model).module_path == "blocks.0.norm2"


def test_values_made_between_submodules_are_blamed_on_the_parent():
    class Toy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)

        def forward(self, x):
            return self.b(self.a(x) * 1e39)  # overflows float32 outside any submodule

    toy = Toy()
    with torch.no_grad():
        toy.a.weight.fill_(1.0)
    with check_finite(toy), pytest.raises(NonFiniteError) as caught:
        toy(torch.ones(1, 2))
    assert caught.value.module_path == "" and "b (Linear) received Inf" in str(caught.value)
    assert "made by code in the model (Toy) between its submodules" in str(caught.value)
    assert caught.value.spec_path is None
