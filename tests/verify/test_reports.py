"""Reproducible reports (issue 27, item 7): a falsifying example prints every drawn field as Python that rebuilds it,
and a component whose output differs between two runs of one example is reported as nondeterministic."""

from __future__ import annotations

from types import SimpleNamespace

import attrs
import pytest
import torch
from hypothesis import given, settings

import blockspec
from blockspec.plugin import hookimpl
from blockspec.spec.schema import ModelConfig
from blockspec.testing import Case, check
from blockspec.testing.cache_cases import CacheCase
from blockspec.testing.nondeterminism import difference
from blockspec.testing.properties import find
from blockspec.testing.strategies import cases

DISTRIBUTION = "reports"
CALLS = {"first_call": 0}


@attrs.frozen(kw_only=True)
class NormConfig:
    """A LayerNorm with a float option, printed in full."""

    eps: float = 1e-5


class FirstCallOff(torch.nn.LayerNorm):
    """Adds 1 on the first call after the count is reset: an example fails once, then passes when replayed."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CALLS["first_call"] += 1
        return super().forward(x) + (1.0 if CALLS["first_call"] == 1 else 0.0)


class Jitter(torch.nn.LayerNorm):
    """Noise from torch's global generator in eval mode: two runs of one example differ."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + 1e-3 * torch.randn_like(x)


@hookimpl
def blockspec_register(register) -> None:
    register("norm", "first_call_off", NormConfig, lambda config, ctx: FirstCallOff(ctx.model.d_model))
    register("norm", "jitter", NormConfig, lambda config, ctx: Jitter(ctx.model.d_model))
    register("norm", "plain", NormConfig, lambda config, ctx: torch.nn.LayerNorm(ctx.model.d_model, eps=config.eps))


@pytest.fixture(scope="module")
def reports() -> blockspec.Registry:
    plugin = SimpleNamespace(blockspec_register=blockspec_register)
    return blockspec.load_registry(plugins=[(plugin, DISTRIBUTION, "0")], entry_points=False, probe=False)


def test_a_drawn_case_prints_every_field_and_pastes_back(reports):
    @settings(max_examples=20, database=None)
    @given(cases(reports.get("norm", "plain", DISTRIBUTION)))
    def printed(case: Case) -> None:
        text = str(case)
        for field in attrs.fields(ModelConfig):  # head_dim, embedding_scale and any field added later
            assert f"{field.alias}={getattr(case.model, field.name)!r}" in text
        for field in attrs.fields(Case):
            assert f" {field.name}={getattr(case, field.name)!r}" in text or text.startswith(f"Case({field.name}=")
        assert eval(text, {"Case": Case, "ModelConfig": ModelConfig, "NormConfig": NormConfig}) == case

    printed()


def test_a_cache_case_prints_its_chunks_and_encoder_once():
    model = ModelConfig(name="m", vocab_size=3, context_length=4, d_model=8, n_layers=1, n_heads=2, d_ff=3,
                        head_dim=4, embedding_scale="sqrt_d")
    case = CacheCase(model=model, config=NormConfig(), factor=1.2345678901, chunks=(2, 1), encoder="rotary")
    text = str(case)
    assert text.count("chunks=(2, 1)") == 1 and "encoder='rotary'" in text and "factor=1.2345678901" in text
    assert "head_dim=4" in text and "embedding_scale='sqrt_d'" in text
    assert eval(text, {"CacheCase": CacheCase, "ModelConfig": ModelConfig, "NormConfig": NormConfig}) == case


def test_an_example_that_fails_once_is_reported_nondeterministic_not_unexamined(reports):
    CALLS["first_call"] = 0
    result = check(reports.get("norm", "first_call_off", DISTRIBUTION), find("deterministic", "norm"))
    assert result.status == "failed"
    assert "nondeterministic: the same example failed, then passed when replayed" in result.message
    assert "second build under the same seed" in result.message  # what the first run found
    assert "hypothesis found no example" not in result.message
    assert result.example is not None


def test_two_runs_of_a_jittering_example_show_where_and_by_how_much(reports):
    jitter = reports.get("norm", "jitter", DISTRIBUTION)
    model = ModelConfig(name="m", vocab_size=3, context_length=4, d_model=4, n_layers=1, n_heads=1, d_ff=3)
    found = difference(jitter, Case(model=model, config=NormConfig()))
    assert found is not None and found.startswith("output max |difference| ")
    assert " at (" in found and " then " in found
    assert difference(reports.get("norm", "plain", DISTRIBUTION), Case(model=model, config=NormConfig())) is None
