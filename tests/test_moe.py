"""blockspec-moe's ffn:moe in a model: it builds, trains with its load-balancing loss, decodes with a
cache, traces its router, matches Hugging Face Mixtral's block, and the command line lists and verifies it."""

from __future__ import annotations

import json

import pytest
import torch

import blockspec
from blockspec.errors import SpecError
from blockspec.inspect.trace import trace
from blockspec.testing.properties.ffn import naive_mixture
from blockspec.data.dataset import CharDataset
from blockspec.generation.tokens import generate
from blockspec.train.loop import Trainer, TrainConfig, auxiliary_loss
from tests.verify.test_random_specs import moe_parameters
from .cli_run import run as cli

pytestmark = pytest.mark.usefixtures("one_thread")

SPEC = """
[model]
vocab_size = 61
context_length = 16
d_model = 32
n_layers = 2
n_heads = 4
d_ff = 24

[positional]
use = "rope"

[norm]
use = "rmsnorm"

[activation]
use = "swiglu"

[head]
use = "lm"

[ffn]
use = "moe"
{ffn}
"""


def moe_spec(registry, ffn: str = "n_experts = 4\ntop_k = 2") -> blockspec.ModelSpec:
    return blockspec.loads_spec(SPEC.format(ffn=ffn), registry)


def test_a_moe_spec_builds_traces_and_decodes_with_a_cache(registry):
    model = blockspec.build(moe_spec(registry), registry=registry, seed=0).eval()
    assert model.provenance["blocks.1.ffn"].qualified_name == "blockspec-moe:moe"
    assert {"blocks.0.ffn.router.weight", "blocks.0.ffn.up", "blocks.0.ffn.down"} <= set(model.state_dict())
    assert model.state_dict()["blocks.0.ffn.up"].shape == (4, 48, 32)  # SwiGLU: gate and value halves
    ids = torch.randint(61, (2, 7), generator=torch.Generator().manual_seed(0))
    result = trace(model, ids)
    assert {"blocks.0.ffn.router", "blocks.0.ffn.experts"} <= set(result.names())
    cached = generate(model, ids[:, :3], max_new_tokens=8, temperature=0.0, use_cache=True)
    uncached = generate(model, ids[:, :3], max_new_tokens=8, temperature=0.0, use_cache=False)
    assert torch.equal(cached, uncached)


def test_a_training_step_adds_the_weighted_load_balancing_loss(registry):
    data = CharDataset.from_text("the quick brown fox jumps over the lazy dog. " * 20)
    spec = blockspec.loads_spec(SPEC.format(ffn="n_experts = 4\ntop_k = 2\naux_loss_coef = 0.5").replace(
        "vocab_size = 61", f"vocab_size = {data.tokenizer.vocab_size}"), registry)
    trainer = Trainer(blockspec.build(spec, registry=registry, seed=0), data,
                      TrainConfig(steps=1, batch_size=4, eval_every=0, eval_batches=1))
    x, y = trainer.batch("train", "train", 0)
    trainer.model.train()
    with torch.no_grad():
        total = trainer.loss(x, y)
        moes = [m for m in trainer.model.modules() if hasattr(m, "aux_loss_coef")]
        assert len(moes) == 2 and all(m.aux_loss is not None for m in moes)
        aux = sum(0.5 * m.aux_loss for m in moes)
        cross_entropy = torch.nn.functional.cross_entropy(trainer.model(x).flatten(0, 1), y.flatten())
    assert torch.allclose(auxiliary_loss(trainer.model), aux)
    assert torch.allclose(total, cross_entropy + aux) and aux > 0
    loss = trainer.train_step()
    assert loss == pytest.approx(total.item(), rel=1e-5)
    trainer.model.eval()
    with torch.no_grad():
        trainer.model(x)
    assert auxiliary_loss(trainer.model) is None  # evaluation: cross-entropy alone


def test_the_load_balancing_loss_is_top_k_when_the_router_is_uniform(registry):
    model = blockspec.build(moe_spec(registry, "n_experts = 8\ntop_k = 2"), registry=registry, seed=0).train()
    moe = model.blocks[0].ffn
    with torch.no_grad():
        moe.router.weight.zero_()
        moe(torch.randn(3, 5, 32))
    assert moe.aux_loss.item() == pytest.approx(2.0)  # E · Σ_e f_e · (1/E) = Σ_e f_e = top_k


def test_shared_experts_and_their_gate_add_to_the_routed_sum(registry):
    spec = moe_spec(registry, "n_experts = 3\ntop_k = 1\nrenormalize = false\nn_shared_experts = 2\n"
                              "shared_gate = true\nexpert_d_ff = 8")
    model = blockspec.build(spec, registry=registry, seed=3).eval()
    moe = model.blocks[1].ffn
    assert moe.up.shape == (3, 16, 32) and moe.shared.up.weight.shape == (32, 32)  # 2 shared x 8, SwiGLU
    assert model.provenance["blocks.1.ffn.shared.act"].name == "swiglu"
    x = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        shared = torch.sigmoid(moe.shared.gate(x)) * moe.shared.down(moe.shared.act(moe.shared.up(x)))
        assert torch.allclose(moe.shared_output(x), shared)
        assert torch.allclose(moe(x), naive_mixture(moe, x), atol=1e-5)
    real = sum(p.numel() for p in model.parameters())
    assert sum(p.numel() for p in moe.parameters()) == moe_parameters(spec)
    assert blockspec.count_parameters(spec, registry).exact == real
    names = trace(model, torch.arange(6).view(1, 6)).names()
    assert {"blocks.1.ffn.router", "blocks.1.ffn.experts", "blocks.1.ffn.shared"} <= set(names)


@pytest.mark.parametrize("defer_from", [0, 10**12], ids=["deferred", "eager"])
def test_the_experts_and_the_router_follow_the_init_table(registry, monkeypatch, defer_from):
    from blockspec.assembly import assemble

    monkeypatch.setattr(assemble, "DEFER_FROM_PARAMETERS", defer_from)
    moe_table = "n_experts = 4\ntop_k = 2\nn_shared_experts = 1\nshared_gate = true"
    text = SPEC.format(ffn=moe_table) + "\n[init]\nstd = 0.001\n"
    moe = blockspec.build(blockspec.loads_spec(text, registry), registry=registry, seed=0).blocks[0].ffn
    residual = 0.001 / (2 * 2) ** 0.5  # std/sqrt(2·n_layers), as for a dense FFN's down projection
    assert moe.router.weight.std().item() == pytest.approx(0.001, rel=0.1)
    assert moe.up.std().item() == pytest.approx(0.001, rel=0.1)  # main: 0.02 (0.0199), hard-coded in the plugin
    assert moe.down.std().item() == pytest.approx(residual, rel=0.1)
    assert moe.shared.up.weight.std().item() == pytest.approx(0.001, rel=0.1)
    assert moe.shared.gate.weight.std().item() == pytest.approx(0.001, rel=0.3)  # 32 weights only
    assert moe.shared.down.weight.std().item() == pytest.approx(residual, rel=0.1)


def test_top_k_beyond_the_experts_is_refused_at_its_field(registry):
    with pytest.raises(SpecError, match=r"\$\.ffn\.top_k: expected a number in \[1, 4\], found 5"):
        moe_spec(registry, "n_experts = 4\ntop_k = 5")


def test_the_build_cross_checks_top_k(registry):
    from blockspec_moe import MoEConfig, build_moe

    config = object.__new__(MoEConfig)  # past the validators, as a hand-made config could be
    for name, value in dict(n_experts=2, top_k=3, renormalize=True, n_shared_experts=0, shared_gate=False,
                            expert_d_ff=None, aux_loss_coef=0.0).items():
        object.__setattr__(config, name, value)
    spec = moe_spec(registry)
    from blockspec.plugin import BuildContext

    ctx = BuildContext(model=spec.model, embedding=torch.nn.Embedding(61, 32), layer=object())
    with pytest.raises(ValueError, match="top_k=3 must be between 1 and n_experts=2"):
        build_moe(config, ctx)


def test_it_matches_hugging_face_mixtral_on_the_same_weights(registry):
    mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")
    from transformers import MixtralConfig

    model = blockspec.build(moe_spec(registry, "n_experts = 4\ntop_k = 2"), registry=registry, seed=5).eval()
    moe = model.blocks[0].ffn
    config = MixtralConfig(hidden_size=32, intermediate_size=24, num_local_experts=4, num_experts_per_tok=2,
                           hidden_act="silu")
    block = mixtral.MixtralSparseMoeBlock(config).eval()
    with torch.no_grad():
        block.gate.weight.copy_(moe.router.weight)
        block.experts.gate_up_proj.copy_(moe.up)
        block.experts.down_proj.copy_(moe.down)
        x = torch.randn(3, 6, 32, generator=torch.Generator().manual_seed(2))
        expected = block(x)
        expected = expected[0] if isinstance(expected, tuple) else expected
        assert torch.allclose(moe(x), expected, atol=1e-5)


def test_list_shows_ffn_moe_from_blockspec_moe(capsys):
    code, out, err = cli(capsys, "list", "--json")
    assert code == 0, err
    text = json.dumps(json.loads(out))
    assert '"moe"' in text and "blockspec-moe" in text
    found = [c for c in _components(json.loads(out)) if c.get("kind") == "ffn" and c.get("name") == "moe"]
    assert found and found[0]["distribution"] == "blockspec-moe"
    assert "mixture" in found[0]["promises"]


def _components(data):
    if isinstance(data, dict):
        if "kind" in data and "name" in data:
            yield data
        for value in data.values():
            yield from _components(value)
    elif isinstance(data, list):
        for value in data:
            yield from _components(value)


def test_verify_passes_for_ffn_moe(capsys):
    code, out, err = cli(capsys, "verify", "--component", "ffn:moe", "--max-examples", "5")
    assert code == 0, out + err
    assert "mixture_sum" in out


def _per_expert(x, weight, sizes):
    """The grouped product written out: each expert's rows times its own weight, one matmul each."""
    return torch.cat([rows @ weight[e].T for e, rows in enumerate(x.split(sizes))])


@pytest.mark.parametrize("width, dtype", [(8, torch.float32), (7, torch.float32), (8, torch.float64)],
                         ids=["grouped_mm", "unaligned-loop", "float64-loop"])
def test_the_grouped_linear_is_each_experts_matmul_forward_and_backward(width, dtype):
    from blockspec_moe.grouped import grouped_linear

    sizes = [3, 0, 5, 1]  # an expert with no rows too
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(sum(sizes), width, dtype=dtype, generator=generator, requires_grad=True)
    weight = torch.randn(len(sizes), width + 4, width, dtype=dtype, generator=generator, requires_grad=True)
    ends = torch.tensor(sizes).cumsum(0).to(torch.int32)
    grad = torch.randn(sum(sizes), width + 4, dtype=dtype, generator=generator)
    got = torch.autograd.grad(grouped_linear(x, weight, ends), (x, weight), grad)
    want = torch.autograd.grad(_per_expert(x, weight, sizes), (x, weight), grad)
    assert torch.allclose(grouped_linear(x, weight, ends), _per_expert(x, weight, sizes), atol=1e-6)
    for ours, theirs in zip(got, want):
        assert torch.allclose(ours, theirs, atol=1e-5)


def test_a_moe_layer_trains_compiled_whole_with_the_eager_result(registry):
    """No graph break and no host sync: the routing decides values, never shapes (fullgraph raises on a break)."""
    from blockspec_activations.modules import SwiGLU
    from blockspec_moe.modules import MixtureOfExperts

    torch.manual_seed(0)
    layer = MixtureOfExperts(d_model=16, d_ff=24, n_experts=4, top_k=2, renormalize=True, activation=SwiGLU(),
                             bias=True, aux_loss_coef=0.01)
    x = torch.randn(2, 9, 16, requires_grad=True)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    got = compiled(x)
    (got.square().sum() + layer.aux_loss).backward()
    eager_grad = x.grad.clone()
    x.grad = None
    want = layer(x)
    (want.square().sum() + layer.aux_loss).backward()
    assert torch.allclose(got, want, atol=1e-6) and torch.allclose(x.grad, eager_grad, atol=1e-5)


@pytest.mark.parametrize("d_ff", [32, 7], ids=["aligned", "unaligned"])
def test_a_moe_layer_runs_on_the_meta_device_for_counting(d_ff):
    from blockspec_activations.modules import SwiGLU
    from blockspec_moe.modules import MixtureOfExperts

    with torch.device("meta"):
        layer = MixtureOfExperts(d_model=16, d_ff=d_ff, n_experts=4, top_k=2, renormalize=True,
                                 activation=SwiGLU(), bias=True)
        assert layer(torch.empty(2, 5, 16)).shape == (2, 5, 16)
