"""What the kit draws for a block or FFN built alone (issue 27, item 1), and the properties that read the draws:
the stand-in layer's partners, index and dropout, integer options off by default, compiles, eval determinism."""

from __future__ import annotations

import attrs
import pytest
import torch.nn.functional as F
from attrs import frozen
from blockspec_moe import MoEConfig
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import blockspec
from blockspec.modules.blocks import PreNormBlock
from blockspec.plugin import BuildContext
from blockspec.registry.components import Component
from blockspec.spec.schema import ModelConfig
from blockspec.testing import Case, check, installed
from blockspec.testing.harness import build_isolated
from blockspec.testing.probe import probe_case
from blockspec.testing.properties import find
from blockspec.testing.strategies import _near_int, cases, configs, installed_partners, model_specs


@frozen(kw_only=True)
class Empty:
    """No fields."""


def _component(kind: str, build, promises: tuple[str, ...] = ()) -> Component:
    return Component(kind=kind, name="probe", config_cls=Empty, build=build, distribution="tests", version="0",
                     promises=frozenset(promises))


def _pre(config: Empty, ctx: BuildContext) -> nn.Module:
    layer = ctx.layer
    return PreNormBlock(norm1=layer.norm("norm1"), attn=layer.attention("attn"), norm2=layer.norm("norm2"),
                        ffn=layer.ffn("ffn"), dropout=layer.dropout)


PRE = _component("block", _pre, ("pre_norm", "compiles"))


def test_the_partners_are_the_installed_norms_and_activations(registry):
    norms = {c.name for c in installed_partners("norm")}
    activations = {c.name for c in installed_partners("activation")}
    assert {"layernorm", "rmsnorm"} <= norms
    assert {"gelu", "swiglu", "relu"} <= activations  # gated ones too: the stand-in FFN feeds them 2·d_ff


@settings(max_examples=100, database=None)
@given(cases(PRE))
def test_the_model_holds_the_layer_the_block_is_built_as(case):
    assert case.model.n_layers > case.layer_index
    assert case.layer_index in (0, 1, 2, 3) and case.model.dropout in (0.0, 0.1, 0.5)


def test_the_draws_reach_rmsnorm_gated_activations_late_layers_and_dropout():
    drawn = _many(cases(PRE), 120)
    assert {c.norm.name for c in drawn if c.norm is not None} >= {"rmsnorm", "layernorm"}
    assert any(c.activation is not None and c.activation.name == "swiglu" for c in drawn)
    assert any(c.norm is None for c in drawn) and max(c.layer_index for c in drawn) == 3
    assert any(c.model.dropout > 0 for c in drawn) and max(c.model.n_layers for c in drawn) >= 3


def _many(strategy, n: int) -> list:
    found: list = []

    @settings(max_examples=n, database=None, derandomize=True)
    @given(strategy)
    def collect(case) -> None:
        found.append(case)

    collect()
    return found


def test_the_stand_in_layer_builds_what_the_case_drew(registry):
    case = attrs.evolve(probe_case(Empty()), norm=registry.get("norm", "rmsnorm"), activation=registry.get(
        "activation", "swiglu"), layer_index=2, model=attrs.evolve(probe_case(Empty()).model, dropout=0.5, n_layers=3))
    built = build_isolated(PRE, case)
    assert isinstance(built.module.norm1, nn.RMSNorm) and built.layer.made["norm1"] is built.module.norm1
    assert getattr(built.module.ffn.act, "gated", False) and built.module.ffn.up.out_features == 2 * case.model.d_ff
    assert built.layer.index == 2 and built.layer.dropout == 0.5 and built.module.drop.p == 0.5
    text = str(case)
    assert "layer_index=2" in text and "dropout=0.5" in text
    assert "norm=installed('norm', 'rmsnorm', 'blockspec-norms')" in text
    assert eval(text, {"Case": Case, "ModelConfig": ModelConfig, "Empty": Empty, "installed": installed}) == case


def test_without_a_drawn_partner_the_layer_is_the_reference_one():
    built = build_isolated(PRE, probe_case(Empty()))  # the load-time probe's case: no registry to draw from
    assert type(built.module.norm1) is nn.LayerNorm and built.layer.index == 0


def test_an_integer_option_off_by_default_is_drawn_on():
    assert _near_int(0) == [0, 1, 2] and _near_int(4) == [2, 4, 8]
    assert {c.n_shared_experts for c in _many(configs(MoEConfig), 60)} == {0, 1, 2}


def _own_layernorms(config: Empty, ctx: BuildContext) -> nn.Module:
    layer, d = ctx.layer, ctx.model.d_model
    return PreNormBlock(norm1=nn.LayerNorm(d), attn=layer.attention("attn"), norm2=nn.LayerNorm(d),
                        ffn=layer.ffn("ffn"), dropout=layer.dropout)


class WrongNormInForward(PreNormBlock):
    """Asks ctx.layer for its norms, then normalises with F.layer_norm over their weights: LayerNorm always."""

    def forward(self, x, positional, start=0, cache=None):
        d = x.shape[-1]
        h = x + self.attn(F.layer_norm(x, (d,), self.norm1.weight, getattr(self.norm1, "bias", None)), positional,
                          start)
        return h + self.ffn(F.layer_norm(h, (d,), self.norm2.weight, getattr(self.norm2, "bias", None)))


def _wrong_norm(config: Empty, ctx: BuildContext) -> nn.Module:
    layer = ctx.layer
    return WrongNormInForward(norm1=layer.norm("norm1"), attn=layer.attention("attn"), norm2=layer.norm("norm2"),
                              ffn=layer.ffn("ffn"), dropout=layer.dropout)


def test_a_block_that_ignores_the_layers_norm_fails_pre_norm():
    result = check(_component("block", _own_layernorms, ("pre_norm",)), find("pre_norm", "block"))
    assert result.status == "failed" and "ctx.layer built no norm1, norm2" in result.message


def test_a_block_that_computes_a_layernorm_itself_fails_pre_norm_with_a_drawn_rmsnorm():
    result = check(_component("block", _wrong_norm, ("pre_norm",)), find("pre_norm", "block"))
    assert result.status == "failed" and "norm=installed('norm'," in str(result.example)  # only another norm shows it


def test_the_first_party_wirings_hold(registry):
    for name, prop in (("pre", "pre_norm"), ("post", "post_norm"), ("parallel", "parallel")):
        assert check(registry.get("block", name), find(prop, "block")).status == "passed", name


class ItemBlock(PreNormBlock):
    def forward(self, x, positional, start=0, cache=None):
        self.seen = x.abs().max().item()  # a host sync: captured under fullgraph, yet a stall every step
        return super().forward(x, positional, start, cache)


class BranchBlock(PreNormBlock):
    def forward(self, x, positional, start=0, cache=None):
        if x.sum() > 0:  # a Python branch on a value: a graph break, which fullgraph=True raises
            return super().forward(x, positional, start, cache)
        return x


def _as(cls: type):
    def build(config: Empty, ctx: BuildContext) -> nn.Module:
        layer = ctx.layer
        return cls(norm1=layer.norm("norm1"), attn=layer.attention("attn"), norm2=layer.norm("norm2"),
                   ffn=layer.ffn("ffn"), dropout=layer.dropout)

    return build


@pytest.mark.parametrize(("cls", "said"), [(ItemBlock, ".item() in self.seen = x.abs().max().item()"),
                                           (BranchBlock, "raised")])
def test_compiles_catches_a_host_sync_and_a_graph_break(cls, said):
    result = check(_component("block", _as(cls), ("compiles",)), find("compiles", "block"))
    assert result.status == "failed" and said in result.message


def test_compiles_passes_the_pre_norm_block_and_runs_one_example_at_the_default_budget():
    assert check(PRE, find("compiles", "block")).status == "passed"
    assert find("compiles", "block").examples(25) == 1 and find("compiles", "block").examples(500) == 20


class DropoutAlways(PreNormBlock):
    def forward(self, x, positional, start=0, cache=None):
        return F.dropout(super().forward(x, positional, start, cache), self.drop.p, training=True)


def test_eval_is_deterministic_catches_dropout_left_on_and_passes_the_pre_norm_block():
    broken = check(_component("block", _as(DropoutAlways)), find("eval_is_deterministic", "block"))
    assert broken.status == "failed" and "second call in eval mode (dropout 0." in broken.message
    assert check(PRE, find("eval_is_deterministic", "block")).status == "passed"


def test_eval_is_deterministic_replays_the_same_verdict():
    component = _component("block", _as(DropoutAlways))
    first, again = (check(component, find("eval_is_deterministic", "block")) for _ in range(2))
    assert first.message == again.message and str(first.example) == str(again.example)


def test_an_eval_case_always_has_dropout():
    prop = find("eval_is_deterministic", "block")
    assert all(c.model.dropout > 0 for c in _many(prop.strategy(PRE), 20))


def _first_party_lm(component) -> bool:
    return component.distribution.startswith("blockspec") and (component.kind != "head" or "lm" in component.promises)


@settings(max_examples=12, database=None, deadline=None)
@given(st.data())
def test_varied_layers_build_and_round_trip_through_toml(registry, data):
    spec = data.draw(model_specs(registry, where=_first_party_lm, vary_layers=True))
    assert blockspec.loads_spec(blockspec.dump_spec(spec), registry) == spec
    model = blockspec.build(spec, registry=registry, seed=0)
    for rule in spec.layers:
        (kind, override), = rule.overrides.items()
        assert all(getattr(spec.layer(i), kind).name == override.use.name for i in rule.layers(spec.model.n_layers))
    assert len(model.blocks) == spec.model.n_layers


def test_varied_layers_are_drawn_and_switch_the_odd_layers(registry):
    specs = _many(model_specs(registry, where=_first_party_lm, vary_layers=True), 40)
    varied = [s for s in specs if s.layers]
    assert varied and all(s.layers[0].layers(s.model.n_layers)[0] == 1 for s in varied)
    assert not any(s.layers for s in _many(model_specs(registry, where=_first_party_lm), 20))
