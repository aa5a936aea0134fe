"""Total and active parameters per token, and the estimate only where its formula describes the model.

Issue 28: `show` gave a mixture of experts' total alone, and printed `12·L·d² + |V|·d` (a dense
FFN's formula) for it as if it estimated the model.
"""

from __future__ import annotations

import json

import pytest
import torch

import blockspec
from blockspec.assembly.counting import count_model
from blockspec.cli import main
from tests.conftest import SPECS

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"vocab_size": 61, "context_length": 16, "d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 24, "bias": True}
MOE = {"use": "moe", "n_experts": 4, "top_k": 2, "n_shared_experts": 1}


def tiny_spec(registry, ffn: dict | None = None) -> blockspec.ModelSpec:
    document = {"model": TINY, "positional": {"use": "rope"}, "norm": {"use": "rmsnorm"},
                "activation": {"use": "swiglu"}, "head": {"use": "lm", "tied": True}}
    if ffn is not None:
        document["ffn"] = ffn
    return blockspec.structure_spec(document, registry)


def test_mixtral_is_about_12_9b_active_of_46_7b(registry):
    count = blockspec.count_parameters(SPECS / "mixtral-8x7b.toml", registry)
    d, d_ff, layers = 4096, 14336, 32
    expert = 3 * d * d_ff  # SwiGLU: w1, w3 (d -> d_ff each) and w2 (d_ff -> d), no biases
    assert count.exact == 46_702_792_704
    assert count.active == count.exact - layers * (8 - 2) * expert == 12_879_925_248  # 2 of 8 experts per token
    assert count.estimate is None  # 12·L·d² + |V|·d counts one dense FFN per layer: not this model


def test_a_tiny_mixture_counts_by_hand(registry):
    d, d_ff, vocab, layers = 32, 24, 61, 2
    attention = d * 3 * d + 3 * d + d * d + d  # fused qkv and proj, with biases
    norms = 2 * d
    router = 4 * d
    expert = d * 2 * d_ff + 2 * d_ff + d_ff * d + d  # SwiGLU up (both halves) and down, with biases
    shared = expert  # one shared expert, ungated
    layer_active = attention + norms + router + 2 * expert + shared  # top 2 of 4 routed experts
    active = vocab * d + layers * layer_active + d  # tied head: the embedding; the final norm
    count = blockspec.count_parameters(tiny_spec(registry, MOE), registry)
    assert count.active == active
    assert count.exact == active + layers * 2 * expert


def test_a_dense_model_is_all_active_and_keeps_its_estimate(registry):
    spec = tiny_spec(registry)
    count = blockspec.count_parameters(spec, registry)
    assert count.active == count.exact
    assert count.estimate == 12 * 2 * 32**2 + 61 * 32


def test_any_module_may_answer_for_what_a_token_passes_through(registry):
    class HalfUsed(torch.nn.Module):  # not a MoE: the core asks the module, it knows no component
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.nn.Parameter(torch.zeros(10, 4))

        def active_parameters(self) -> int:
            return 20

    model = blockspec.build(tiny_spec(registry), registry=registry, device="meta")
    before = count_model(model)
    model.extra = HalfUsed()
    after = count_model(model)
    assert (after.exact, after.active) == (before.exact + 40, before.active + 20)


def test_an_answer_beyond_the_modules_parameters_is_refused(registry):
    class Wrong(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(3))

        def active_parameters(self) -> int:
            return 5

    model = blockspec.build(tiny_spec(registry), registry=registry, device="meta")
    model.extra = Wrong()
    with pytest.raises(ValueError, match=r"extra: .*active_parameters\(\) returned 5.*0 to 3"):
        count_model(model)


def run_show(capsys, spec, *flags) -> str:
    assert main(["show", str(spec), *flags]) == 0
    return capsys.readouterr().out


def test_show_gives_total_and_active_and_no_estimate_for_a_mixture(capsys):
    shown = json.loads(run_show(capsys, SPECS / "mixtral-8x7b.toml", "--json"))
    assert (shown["parameters"], shown["parameters_active"]) == (46_702_792_704, 12_879_925_248)
    assert shown["parameters_estimate"] is None
    text = run_show(capsys, SPECS / "mixtral-8x7b.toml")
    assert "active per token" in text and "12,879,925,248" in text
    assert "12·L·d²" not in text


def test_show_keeps_the_estimate_line_for_a_dense_model(capsys):
    text = run_show(capsys, SPECS / "gpt2-small.toml")
    assert "12·L·d² + |V|·d" in text and "active per token" not in text
    shown = json.loads(run_show(capsys, SPECS / "gpt2-small.toml", "--json"))
    assert shown["parameters_active"] == shown["parameters"]
