"""Issue 27, items 4 and 5: what the kit checks is what a component promises, not what the first-party
components happen to do (rows summing to 1, RoPE's scalings, one count for every layer, RMSNorm without eps),
and the mixture-of-experts contract serves top-1 routers and ModuleList experts."""

from __future__ import annotations

import attrs
import pytest
import torch

from blockspec.assembly.builtin import CausalAttentionConfig
from blockspec.errors import RegistrationError
from blockspec.modules.attention import CausalSelfAttention
from blockspec.registry.components import Component, validate_component
from blockspec.spec.schema import ModelConfig
from blockspec.testing import check
from blockspec.testing.cases import Case
from blockspec.testing.formulas import model_parameters, per_layer
from blockspec.testing.properties import find
from blockspec.testing.properties.attention import check_qk_norm, reference_mask, softmax_with_sinks
from tests.verify.corpus.attention import CAUSAL, QKNormNoSqrt, attention_as
from tests.verify.corpus.ffn import SWITCH, SwitchConfig, SwitchMoE, switch_as


def component(kind: str, name: str, config_cls: type, build, promises: tuple[str, ...]) -> Component:
    made = Component(kind=kind, name=name, config_cls=config_cls, build=build, distribution="acme",
                     version="1.0", promises=frozenset(promises))
    validate_component(made)
    return made


def qk_case(eps: float, **overrides) -> Case:
    model = ModelConfig(name="t", vocab_size=11, context_length=8, d_model=8, n_layers=1, n_heads=2, n_kv_heads=2,
                        d_ff=12)
    config = CausalAttentionConfig(qk_norm="head", qk_norm_eps=eps)
    return Case(model=model, config=config, **{"tokens": 5, "seed": 3, **overrides})


def test_the_qk_norm_bound_follows_eps_where_an_rms_of_one_does_not_hold() -> None:
    """With eps = 0.5 the RMS of a normalised head is rms/√(rms² + 0.5), far below 1: correct, and passed."""
    correct = component("attention", "causal_eps", CausalAttentionConfig, attention_as(CausalSelfAttention), CAUSAL)
    check_qk_norm(correct, qk_case(0.5), "cpu")
    check_qk_norm(correct, qk_case(1e-6, trained=True), "cpu")


def test_the_qk_norm_bound_still_catches_a_missing_square_root_at_a_large_eps() -> None:
    broken = component("attention", "no_sqrt", CausalAttentionConfig, attention_as(QKNormNoSqrt), CAUSAL)
    with pytest.raises(AssertionError, match="rms\\(u\\)/√"):
        check_qk_norm(broken, qk_case(0.5), "cpu")


def test_sink_weights_are_the_softmax_joined_by_each_heads_sink() -> None:
    scores = torch.randn(2, 3, 4, 4, dtype=torch.float64) + reference_mask(4, 4, None, torch.device("cpu"))
    sinks = torch.tensor([0.0, 1.0, -2.0])
    weights = softmax_with_sinks(scores, sinks)
    expected = scores.exp() / (scores.exp().sum(-1, keepdim=True) + sinks.double().exp().view(1, 3, 1, 1))
    torch.testing.assert_close(weights, expected)
    assert bool((weights.sum(-1) < 1).all())
    torch.testing.assert_close(softmax_with_sinks(scores, None).sum(-1), torch.ones(2, 3, 4, dtype=torch.float64))


def test_the_reference_mask_is_causal_and_windowed_bottom_right() -> None:
    allowed = reference_mask(2, 5, 2, torch.device("cpu")) == 0  # queries 3 and 4 of keys 0..4, window 2
    assert allowed.tolist() == [[False, False, True, True, False], [False, False, False, True, True]]


@pytest.mark.parametrize(("promise", "needs"), [("sinks", "causal")])
def test_sinks_need_causal(promise: str, needs: str) -> None:
    with pytest.raises(RegistrationError, match=f"promise '{promise}' needs '{needs}'"):
        component("attention", "lonely", CausalAttentionConfig, attention_as(CausalSelfAttention), (promise,))


def test_aux_loss_needs_mixture() -> None:
    with pytest.raises(RegistrationError, match="promise 'aux_loss' needs 'mixture'"):
        component("ffn", "switch", SwitchConfig, switch_as(SwitchMoE), ("aux_loss",))


def test_a_top_1_router_without_a_top_k_field_registers_and_passes_the_mixture_checks() -> None:
    assert "top_k" not in attrs.fields_dict(SwitchConfig)
    switch = component("ffn", "switch", SwitchConfig, switch_as(SwitchMoE), SWITCH)
    for name in ("mixture_sum", "mixture_routing", "mixture_single_expert", "mixture_permutation", "aux_loss"):
        result = check(switch, find(name, "ffn"), max_examples=4)
        assert result.status == "passed", (name, result.message)


class EvalAuxLoss(SwitchMoE):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        flat = x.reshape(-1, x.shape[-1])  # (B, N, d) -> (T, d)
        _, index, probs = self.routing(self.router(flat))
        self.aux_loss = self.balancing_loss(probs, index)  # kept in eval mode too
        return out


def test_an_aux_loss_left_set_in_eval_mode_fails() -> None:
    broken = component("ffn", "switch_eval_aux", SwitchConfig, switch_as(EvalAuxLoss), SWITCH)
    result = check(broken, find("aux_loss", "ffn"), max_examples=4)
    assert result.status == "failed"
    assert "after an eval-mode forward aux_loss is a tensor" in result.message


def test_per_layer_counts_add_up_layer_by_layer() -> None:
    model = ModelConfig(name="t", vocab_size=11, context_length=8, d_model=8, n_layers=3, n_heads=2, n_kv_heads=2,
                        d_ff=12)
    shares = dict(positional=0, norm=16, attention=100, head=88, gated=False)
    assert model_parameters(model, block=[10, 20, 30], **shares) == model_parameters(model, block=20, **shares)
    assert model_parameters(model, block=[12, 10, 10], **shares) == model_parameters(model, block=10, **shares) + 2
    assert per_layer(5, 2) == [5, 5]
    with pytest.raises(ValueError, match="2 per-layer counts for 3 layers"):
        per_layer([1, 2], 3)
