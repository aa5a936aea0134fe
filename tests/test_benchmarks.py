"""The benchmark compares like with like: its peers compute the same function as the blockspec model."""

from __future__ import annotations

import attrs
import pytest
import torch

import blockspec
from benchmarks import report
from benchmarks.cases import CASES, Case
from benchmarks.peers import build_hf, build_reference
from benchmarks.timing import Timing, interleave, paired_ratio


def shrunk(case: Case, registry: blockspec.Registry) -> blockspec.ModelSpec:
    """The case's architecture at a test-sized width, depth and vocabulary."""
    spec = case.spec(registry)
    kv_heads = None if spec.model.n_kv_heads is None else 2  # keep GQA where the case has it
    small = attrs.evolve(spec.model, vocab_size=101, d_model=32, n_layers=2, n_heads=4, n_kv_heads=kv_heads, d_ff=48)
    return attrs.evolve(spec, model=small)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_reference_is_the_same_function_on_the_same_weights(registry, case):
    spec = shrunk(case, registry)
    model = blockspec.build(spec, registry=registry, seed=0).eval()
    reference = build_reference(spec, model).eval()
    ids = torch.randint(0, 101, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(reference(ids), model(ids), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_hugging_face_peer_is_the_same_function_on_the_same_weights(registry, case):
    pytest.importorskip("transformers")
    spec = shrunk(case, registry)
    model = blockspec.build(spec, registry=registry, seed=0).eval()
    hf = build_hf(spec, case.hf_family, model)
    ids = torch.randint(0, 101, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(hf(ids, use_cache=False).logits, model(ids), atol=1e-5, rtol=1e-4)


def test_interleave_measures_every_contender_every_round():
    calls = {"a": 0, "b": 0}

    def bump(name):
        return lambda: calls.__setitem__(name, calls[name] + 1)

    timings = interleave({"a": bump("a"), "b": bump("b")}, rounds=4, warmup=1, target_s=0.0)
    assert [len(t.samples) for t in timings.values()] == [4, 4]
    assert calls == {"a": 5, "b": 5}  # one warm-up (it also sizes the samples), one per round
    assert paired_ratio(Timing([2.0, 4.0, 6.0]), Timing([1.0, 1.0, 2.0])) == 3.0


def test_report_marks_a_missed_target():
    timing = {"median_s": 1.0, "min_s": 1.0, "max_s": 1.0, "rounds": 1}
    section = {"timings": {"blockspec": timing, "reference": timing, "hf": timing},
               "ratios": {"reference": 1.04, "hf": 0.5}, "ratios_paired": {"reference": 1.0, "hf": 0.5},
               "ratios_min": {"reference": 1.0, "hf": 0.5}}
    data = {"speed": {"forward": section, "forward_backward": section}}
    big, tiny = report.speed_rows("gpt2-small", data), report.speed_rows(report.SMALL, data)
    assert "1.040 MISS (<= 1.02)" in big[0] and "0.500 ok (<= 0.95)" in big[0]
    assert "1.040 ok (<= 1.05)" in tiny[0] and "0.500 ok (<= 0.80)" in tiny[0]


def test_report_marks_a_ragged_batch_under_3x_as_missed():
    timing = {"median_s": 1.0, "min_s": 1.0, "max_s": 1.0, "rounds": 1}
    ragged = {"timings": {"ragged": timing, "one_by_one": timing}, "same_tokens": True}
    results = {"cases": {"fast": {"generation": {"ragged": {**ragged, "speedup": 8.8, "speedup_paired": 8.2}}},
                         "slow": {"generation": {"ragged": {**ragged, "speedup": 2.9, "speedup_paired": 3.1}}}}}
    fast, slow = report.ragged_rows(results)
    assert "8.80 (paired 8.20) ok (>= 3.00)" in fast and "2.90 (paired 3.10) MISS (>= 3.00)" in slow


@pytest.mark.parametrize("window", [None, 5])
def test_the_sinks_benchmark_times_the_same_function_as_gpt_oss_attention(window):
    """benchmarks/sinks.py times blockspec's sink attention against gpt-oss's on the same weights and RoPE."""
    pytest.importorskip("transformers")
    from benchmarks.sinks import build_pair, hf_runner

    ours, positions, hf, rotary = build_pair(window)
    x = torch.randn(2, 12, 256, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(ours(x, positions), hf_runner(hf, rotary, x, window)(x), atol=1e-5, rtol=1e-4)
        assert not torch.allclose(ours(x, positions), hf_runner(hf, rotary, x, window)(x * 1.01), atol=1e-5)


def test_the_mla_benchmark_times_the_same_function_as_deepseek_v3_attention():
    """benchmarks/mla.py times blockspec-attention's mla against DeepseekV3Attention on the same weights."""
    pytest.importorskip("transformers")
    from benchmarks.mla import build_pair, hf_runner

    ours, rope, hf, rotary = build_pair()
    x = torch.randn(2, 12, 256, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(ours(x, rope), hf_runner(hf, rotary, x)(x), atol=1e-5, rtol=1e-4)


def test_the_moe_benchmark_times_the_same_function_as_deepseek_v3_moe():
    """benchmarks/moe.py's DeepSeek pair: the same routing (groups, correction, scaling) and experts."""
    pytest.importorskip("transformers")
    from benchmarks.moe import build_pair, hf_output

    ours, hf = build_pair(None, peer="deepseek")
    x = torch.randn(2, 12, 128, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), hf_output(hf, x), atol=1e-5, rtol=1e-4)
