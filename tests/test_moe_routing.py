"""blockspec-moe's DeepSeek V3 routing (sigmoid scores, group-limited top-k, a correction bias, routed scaling)
and gpt-oss's router bias: transformers' modules on the same weights, aux-loss-free balancing, refusals."""

from __future__ import annotations

import pytest
import torch
from tomli_w import dumps

import blockspec
from blockspec.assembly.counting import count_parameters

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

DEEPSEEK = {"n_experts": 8, "top_k": 2, "scoring": "sigmoid", "n_group": 4, "topk_group": 2, "routed_scaling": 2.5,
            "correction_bias": True, "n_shared_experts": 1, "expert_d_ff": 16}


def spec_of(ffn: dict, registry, model: dict | None = None):
    document = {"model": {"vocab_size": 41, "context_length": 32, "d_model": 32, "n_layers": 2, "n_heads": 4,
                          "d_ff": 48, "bias": False, **(model or {})},
                "positional": {"use": "rope"}, "norm": {"use": "rmsnorm"}, "activation": {"use": "swiglu"},
                "head": {"use": "lm"}, "ffn": {"use": "moe", **ffn}}
    return blockspec.loads_spec(dumps(document), registry, file="spec.toml")


def mixture(registry, ffn: dict, model: dict | None = None):
    built = blockspec.build(spec_of(ffn, registry, model), registry=registry, seed=0)
    return built.blocks[0].ffn.double()


@pytest.mark.parametrize("renormalize", [True, False])
def test_the_same_function_as_transformers_deepseek_v3_moe(registry, renormalize):
    pytest.importorskip("transformers")
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

    from benchmarks.moe import copy_to_deepseek

    ours = mixture(registry, {**DEEPSEEK, "renormalize": renormalize})
    config = DeepseekV3Config(hidden_size=32, n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2,
                              routed_scaling_factor=2.5, norm_topk_prob=renormalize, n_shared_experts=1,
                              moe_intermediate_size=16, hidden_act="silu")
    theirs = DeepseekV3MoE(config).double()
    with torch.no_grad():
        for p in ours.parameters():
            p.normal_(0.0, 0.3)
        ours.correction.normal_(0.0, 0.2)  # moved off zero, as balancing leaves it
    copy_to_deepseek(ours, theirs)
    with torch.no_grad():
        x = torch.randn(3, 7, 32, dtype=torch.float64)
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-5)  # transformers routes in float32


def test_the_router_bias_routes_as_gpt_oss_router(registry):
    """gpt-oss: a softmax over the top-k biased logits, which is the renormalised top-k of the full softmax."""
    pytest.importorskip("transformers")
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssTopKRouter

    ours = mixture(registry, {"n_experts": 8, "top_k": 4, "router_bias": True})
    theirs = GptOssTopKRouter(GptOssConfig(hidden_size=32, num_local_experts=8, num_experts_per_tok=4)).double()
    with torch.no_grad():
        ours.router.weight.normal_(0.0, 0.5)
        ours.router.bias.normal_(0.0, 1.0)
        theirs.weight.copy_(ours.router.weight)
        theirs.bias.copy_(ours.router.bias)
        x = torch.randn(20, 32, dtype=torch.float64)
        weights, index, _ = ours.routing(ours.router(x))
        _, their_weights, their_index = theirs(x)
    assert torch.equal(index.sort(-1).values, their_index.sort(-1).values)
    torch.testing.assert_close(weights.gather(-1, index.argsort(-1)), their_weights.gather(-1, their_index.argsort(-1)))


def test_balancing_moves_the_correction_towards_an_even_load_without_gradient(registry):
    ours = mixture(registry, {**DEEPSEEK, "balance_rate": 0.01}).float().train()
    token = torch.randn(1, 1, 32)
    chosen = ours.routing(ours.router(token[0]))[1][0]
    ours(token.expand(2, 6, 32).contiguous())  # one token repeated: its experts take every assignment
    moved = ours.correction.clone()
    assert all(moved[e] == pytest.approx(-0.01) for e in chosen.tolist())
    assert all(moved[e] == pytest.approx(0.01) for e in range(8) if e not in chosen.tolist())
    assert not ours.correction.requires_grad
    ours.eval()
    ours(token)
    assert torch.equal(ours.correction, moved)  # evaluation leaves it


def test_the_correction_is_saved_with_the_weights_and_counts_no_parameter(registry, tmp_path):
    from blockspec.checkpoint.directory import load, save

    spec = spec_of(DEEPSEEK, registry)
    model = blockspec.build(spec, registry=registry, seed=0)
    with torch.no_grad():
        model.blocks[1].ffn.correction.fill_(0.25)
    save(model, tmp_path / "ckpt")
    assert float(load(tmp_path / "ckpt", registry=registry).blocks[1].ffn.correction[3]) == 0.25
    plain = spec_of({k: v for k, v in DEEPSEEK.items() if k not in ("correction_bias",)}, registry)
    assert count_parameters(spec, registry).exact == count_parameters(plain, registry).exact
    biased = spec_of({**DEEPSEEK, "router_bias": True}, registry)
    assert count_parameters(biased, registry).exact == count_parameters(spec, registry).exact + 2 * 8


@pytest.mark.parametrize(("fields", "path", "message"), [
    ({"n_group": 4, "topk_group": 5}, "$.ffn.topk_group", "expected at most n_group = 4, found 5"),
    ({"n_group": 3}, "$.ffn.n_group", "expected a divisor of n_experts = 8, found 3"),
    ({"n_group": 4, "topk_group": 1, "top_k": 3}, "$.ffn.top_k", "expected at most the 2 experts"),
    ({"balance_rate": 0.001}, "$.ffn.balance_rate", "set correction_bias = true"),
    ({"scoring": "tanh"}, "$.ffn.scoring", "expected one of"),
    ({"routed_scaling": 0.0}, "$.ffn.routed_scaling", "expected a number > 0.0"),
])
def test_bad_routing_is_refused_in_one_line_at_its_key(fields, path, message, registry):
    with pytest.raises(blockspec.SpecError) as caught:
        spec_of({"n_experts": 8, "top_k": 2, **fields}, registry)
    assert path in str(caught.value) and message in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1


def test_the_clamped_swiglu_is_gpt_oss_gate_on_its_halves():
    """gpt-oss interleaves gate and value features in its checkpoint; blockspec's gated activations take halves
    (the FFN's weight layout): the same function once the features are de-interleaved."""
    pytest.importorskip("transformers")
    from blockspec_activations.modules import ClampedSwiGLU
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    theirs = GptOssExperts(GptOssConfig(hidden_size=8, intermediate_size=6, num_local_experts=2))
    gate, value = torch.randn(2, 5, 6, dtype=torch.float64) * 6, torch.randn(2, 5, 6, dtype=torch.float64) * 6
    interleaved = torch.stack((gate, value), dim=-1).flatten(-2)  # (.., 6, 2) -> (.., 12): g0, v0, g1, v1, ...
    expected = theirs._apply_gate(interleaved)
    torch.testing.assert_close(ClampedSwiGLU(alpha=1.702, limit=7.0)(torch.cat((gate, value), dim=-1)), expected)
    assert bool((gate > 7).any() and (value.abs() > 7).any())  # both clamps are exercised
