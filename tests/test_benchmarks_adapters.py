"""The adapter benchmark compares like with like: PEFT's LoRA is blockspec's LoRA, on the same weights and batches."""

from __future__ import annotations

import attrs
import pytest
import torch

import blockspec
from benchmarks import adapters, report

pytest.importorskip("peft")


@pytest.fixture
def tiny_gpt2(registry) -> blockspec.ModelSpec:
    """The gpt2-small case's architecture at a test-sized width, depth and vocabulary."""
    spec = adapters.gpt2_small(registry)
    return attrs.evolve(spec, model=attrs.evolve(spec.model, vocab_size=101, d_model=32, n_layers=2, n_heads=4,
                                                 d_ff=48))


def test_peft_lora_is_blockspec_lora_on_the_same_weights(registry, tiny_gpt2):
    base, adapted = adapters.specs(tiny_gpt2, registry, context=16)
    full = blockspec.build(base, registry=registry, seed=0)
    lora = blockspec.build(adapted, registry=registry, seed=0).eval()
    with torch.no_grad():  # a trained B: at initialisation B is zero, and any A would agree
        for path in lora.adapted:
            lora.get_submodule(path).lora_B.weight.normal_()
    peft = adapters.peft_model(base, full, lora).eval()
    ids = torch.randint(0, 101, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(peft(input_ids=ids, use_cache=False).logits, lora(ids), atol=1e-5, rtol=1e-4)
    wrapped = [name for name, module in peft.named_modules() if hasattr(module, "lora_A")]
    assert len(wrapped) == len(lora.adapted) == 2 * base.model.n_layers  # attention only: no MLP c_proj


def test_the_section_trains_the_same_function_and_counts_adam_state(registry, tiny_gpt2):
    result = adapters.compare(registry, rounds=2, batch=2, context=16, memory=False, spec=tiny_gpt2)
    trainable, state = result["trainable"], result["optimizer_state_bytes"]
    per_layer = adapters.RANK * (32 + 96) + adapters.RANK * (32 + 32)  # qkv: A (r, 32), B (96, r); proj: 2 (32 x r)
    assert trainable["lora"] == trainable["peft"] == 2 * per_layer
    tensors = 2 * 2 * 2  # layers x (qkv, proj) x (A, B)
    assert state["lora"] == state["peft"] == 2 * 4 * trainable["lora"] + 4 * tensors  # exp_avg, exp_avg_sq, step
    assert len(result["losses"]["lora"]) == adapters.WARMUP + 1 + 2  # warm-up, interleave's warm call, rounds
    medians = {name: timing["median_s"] for name, timing in result["timings"].items()}
    assert result["ratios"] == {f"lora/{peer}": medians["lora"] / medians[peer] for peer in ("full", "peft")}
    assert result["loss_difference_lora_peft"] < 1e-4
    assert result["losses"]["full"][0] == pytest.approx(result["losses"]["lora"][0], abs=1e-5)  # the same base
    lines = report.adapter_lines({"adapters": result})
    assert any(line.startswith("| optimizer state (MiB)") and "MISS (<= 0.02)" in line for line in lines)  # tiny: 16%
