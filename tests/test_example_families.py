"""The example specs of the open model families count exactly what the released models hold.

Each figure is the released model's, as ``transformers`` counts it for the released config; the
counts come from the meta device, so a 46.7B mixture of experts costs no memory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import blockspec

SPECS = Path(__file__).resolve().parents[1] / "examples" / "specs"
RELEASED = {
    "pythia-160m": 162_322_944,  # parallel block, partial rotary
    "qwen2.5-0.5b": 494_032_768,  # q/k/v bias without output bias, GQA, tied
    "gemma-2-2b": 2_614_341_888,  # sandwich norms, head_dim 256, (1 + w) RMSNorm, alternating windows
    "olmo-2-1b": 1_484_916_736,  # output norm, qk-norm over all heads
    "mixtral-8x7b": 46_702_792_704,  # mixture of 8 experts, top 2
    "phi-2": 2_779_683_840,  # parallel block with one norm, partial rotary, an output layer with a bias
    "smollm3-3b": 3_075_098_624,  # every fourth layer RoPE-free (NoPE), GQA, tied
}


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_example_spec_counts_the_released_model_exactly(name, registry):
    spec = blockspec.load_spec(SPECS / f"{name}.toml", registry)
    assert blockspec.count_parameters(spec, registry).exact == RELEASED[name]


def test_gemma_2_alternates_sliding_and_global_layers(registry):
    spec = blockspec.load_spec(SPECS / "gemma-2-2b.toml", registry)
    windows = [spec.layer(i).attention.config.sliding_window for i in range(spec.model.n_layers)]
    assert windows == [4096, None] * 13
    assert all(spec.layer(i).attention.config.logit_softcap == 50.0 for i in range(spec.model.n_layers))


def test_smollm3_skips_rope_on_every_fourth_layer(registry):
    spec = blockspec.load_spec(SPECS / "smollm3-3b.toml", registry)
    assert [spec.layer(i).positional.name for i in range(8)] == ["rope"] * 3 + ["none"] + ["rope"] * 3 + ["none"]
