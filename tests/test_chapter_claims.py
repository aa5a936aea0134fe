"""The chapter's numerical claims, measured with blockspec (examples/chapter_claims.py) and asserted.

docs/chapter-claims.md lists each claim with the command that reproduces it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _load_claims():
    spec = importlib.util.spec_from_file_location("chapter_claims", ROOT / "examples" / "chapter_claims.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


claims = _load_claims()


pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest


def test_sinusoidal_wavelengths_at_d_512():
    measured = claims.wavelengths()
    assert measured[0] == pytest.approx(6.28, abs=0.005)
    assert measured[64] == pytest.approx(63, abs=0.5)
    assert measured[255] == pytest.approx(60_600, rel=0.001)


@pytest.mark.parametrize("k", claims.SHIFTS)
def test_the_whole_shift_map_fits_at_float32_rounding(k):
    """One 512x512 map over 2048 positions: float32 QR leaves ~3e-6 (the chapter's 2.9e-6), float64 ~7e-8."""
    single, double = claims.fit_whole_map(k, dtype=torch.float32), claims.fit_whole_map(k, dtype=torch.float64)
    assert single["error"] < 1e-5
    assert double["error"] < 1e-7  # the float32 table's own rounding
    assert single["blocks_0_64"] < 1e-6 and double["blocks_0_64"] < 1e-8
    # low-frequency pairs barely turn in 2048 positions: the whole map is not identifiable there
    assert double["blocks_all"] > 0.1


@pytest.mark.parametrize("k", claims.SHIFTS)
def test_each_pairs_fitted_block_is_the_rotation(k):
    assert claims.fit_each_pair(k, 2048, torch.float64)["blocks_all"] < 1e-8
    assert claims.fit_each_pair(k, 512, torch.float64)["blocks_all"] < 6e-8  # the chapter's bound


def test_learned_table_has_4096_parameters_and_sinusoidal_none():
    assert claims.positional_parameters("tiny-shakespeare") == 4096
    assert claims.positional_parameters("tiny-shakespeare-sinusoidal") == 0


@pytest.mark.parametrize(("values", "expected"), [
    ([2.0, 4.0, 6.0, 8.0], [-1.342, -0.447, 0.447, 1.342]),
    ([4.0, 8.0, 12.0, 16.0], [-1.342, -0.447, 0.447, 1.342]),
])
def test_layernorm_examples(values, expected):
    assert [round(v, 3) for v in claims.layernorm(values)] == expected


def test_layernorm_of_a_lone_outlier_ends_in_sqrt_3():
    assert round(claims.layernorm([1.0, 1.0, 1.0, 5.0])[-1], 3) == 1.732


def test_parameter_counts():
    figures = claims.parameter_figures()
    assert figures["output_layer"] == 50_257 * 768 == 38_597_376
    assert figures["gpt2_small"] == 124_439_808
    assert round(figures["gpt2_small_blocks"] / 1e6) == 85
    assert round(figures["gpt2_small_embeddings"] / 1e6) == 39
    assert figures["gpt2_small_blocks"] + figures["gpt2_small_embeddings"] + 2 * 768 == figures["gpt2_small"]
    assert round(figures["gpt2_medium_blocks"] / 1e6) == 302


def test_residuals_carry_the_gradient_through_48_near_zero_sublayers():
    ratios = claims.residual_gradients()
    assert ratios["with_residual"] == pytest.approx(1.0, abs=0.05)
    assert ratios["without_residual"] < 1e-50
