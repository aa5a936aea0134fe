"""[[adapters]]: LoRA and DoRA around a built model's linear layers (issue 26, items 1 and 2).

The spec reads them strictly, the assembler wraps exactly the layers each entry targets after the
base is built, a fresh adapter leaves the model's outputs as they were, merging folds it into plain
linear layers, and a frozen base trains only the adapters.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import torch
from torch import nn

import blockspec
from blockspec.cli import main
from blockspec.errors import SpecError
from blockspec.modules.adapter import Adapter, freeze_base
from blockspec.spec.convert import spec_to_dict

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "specs" / "tiny-shakespeare.toml"
IDS = torch.tensor([[1, 5, 9, 2, 7], [3, 3, 0, 64, 12]])  # (B, N) token ids below the example's 65


@pytest.fixture(scope="module")
def document() -> dict:
    return tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))


def adapted(document: dict, registry, *entries: dict) -> blockspec.ModelSpec:
    return blockspec.structure_spec({**document, "adapters": list(entries)}, registry)


def problems(document: dict, registry, *entries: dict) -> list[str]:
    with pytest.raises(SpecError) as caught:
        spec = adapted(document, registry, *entries)
        blockspec.build(spec, registry=registry, seed=0)
    return [str(p) for p in caught.value.problems]


def trained(model: nn.Module, seed: int = 1) -> nn.Module:
    """Every adapter's own parameters moved off their initial values, as fine-tuning would leave them."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, Adapter):
                for _, p in module.adapter_parameters():
                    p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return model


def test_a_spec_without_adapters_builds_the_model_it_built_before(document, registry):
    spec = blockspec.structure_spec(document, registry)
    model = blockspec.build(spec, registry=registry, seed=0)
    assert spec.adapters == () and "adapters" not in spec_to_dict(spec) and model.adapted == {}
    assert not any(isinstance(m, Adapter) for m in model.modules())


@pytest.mark.parametrize("use", ["lora", "dora"])
def test_the_targets_are_wrapped_and_a_fresh_adapter_changes_nothing(document, registry, use):
    spec = adapted(document, registry, {"use": use, "targets": ["blocks.*.attn.qkv", "@ffn"], "rank": 4})
    model, base = blockspec.build(spec, registry=registry, seed=0), blockspec.build(document_spec(document, registry),
                                                                                  registry=registry, seed=0)
    assert list(model.adapted) == ["blocks.0.attn.qkv", "blocks.0.ffn.up", "blocks.0.ffn.down",
                                   "blocks.1.attn.qkv", "blocks.1.ffn.up", "blocks.1.ffn.down"]
    renamed = {key.replace(".base_layer.", "."): value for key, value in model.state_dict().items()
               if not key.rpartition(".")[0].split(".")[-1].startswith("lora_") and "lora_magnitude" not in key}
    assert renamed.keys() == base.state_dict().keys()  # the base is exactly the model without adapters
    assert all(torch.equal(renamed[k], v) for k, v in base.state_dict().items())
    with torch.no_grad():
        assert torch.equal(model.eval()(IDS), base.eval()(IDS))


def document_spec(document: dict, registry) -> blockspec.ModelSpec:
    return blockspec.structure_spec(document, registry)


@pytest.mark.parametrize("use", ["lora", "dora"])
def test_merging_every_adapter_gives_the_adapted_logits(document, registry, use):
    spec = adapted(document, registry, {"use": use, "targets": ["@attention", "@ffn"], "rank": 2, "alpha": 5.0})
    model = trained(blockspec.build(spec, registry=registry, seed=0)).eval()
    with torch.no_grad():
        expected = model(IDS)
        for path in model.adapted:
            parent, _, name = path.rpartition(".")
            setattr(model.get_submodule(parent), name, model.get_submodule(path).merged())
        assert not any(isinstance(m, Adapter) for m in model.modules())
        torch.testing.assert_close(model(IDS), expected, atol=1e-5, rtol=1e-5)
        assert (expected - blockspec.build(document_spec(document, registry), seed=0).eval()(IDS)).abs().max() > 1e-3


def test_lora_and_dora_compute_peft_s_formulas():
    """LoRA: Wx + b + (alpha/r)·B·A·x; DoRA: m ⊙ (W + s·B·A)x / ‖W + s·B·A‖_row + b (PEFT's merge, written out)."""
    from blockspec_adapters.modules import DoraLinear, LoraLinear

    torch.manual_seed(0)
    base, x = nn.Linear(6, 5), torch.randn(3, 6)
    lora = trained(LoraLinear(base, rank=2, alpha=3.0, dropout=0.0, init="gaussian"))
    dora = trained(DoraLinear(base, rank=2, alpha=3.0, dropout=0.0, init="kaiming"))
    with torch.no_grad():
        delta = 1.5 * lora.lora_B.weight @ lora.lora_A.weight  # alpha / rank = 1.5
        torch.testing.assert_close(lora(x), x @ (base.weight + delta).T + base.bias)
        weight = base.weight + 1.5 * dora.lora_B.weight @ dora.lora_A.weight
        direction = weight / weight.norm(dim=1, keepdim=True)  # (out, in), each row of length 1
        magnitude = dora.lora_magnitude_vector[:, None]  # (out,) -> (out, 1): one scale per row
        torch.testing.assert_close(dora(x), x @ (magnitude * direction).T + base.bias)


def test_a_frozen_base_trains_only_the_adapters(document, registry):
    spec = adapted(document, registry, {"use": "lora", "targets": ["blocks.*.attn.*"], "rank": 2})
    model = blockspec.build(spec, registry=registry, seed=0)
    trainable = freeze_base(model)
    names = {name for name, p in model.named_parameters() if p.requires_grad}
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    assert trainable == sum(p.numel() for p in model.parameters() if p.requires_grad) == 2 * (2 * 64 + 2 * 192 + 2 * 64
                                                                                                + 2 * 64)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimiser = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    for _ in range(2):
        optimiser.zero_grad()
        logits = model(IDS[:, :-1]).flatten(0, 1)  # (B, N-1, V) -> (B·(N-1), V)
        nn.functional.cross_entropy(logits, IDS[:, 1:].flatten()).backward()  # targets (B, N-1) -> (B·(N-1),)
        optimiser.step()
    moved = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert moved and moved <= names


def test_a_spec_with_adapters_dumps_and_reads_back(document, registry):
    spec = adapted(document, registry, {"use": "blockspec-adapters:dora", "targets": ["@attention"], "rank": 3,
                                        "dropout": 0.1})
    assert blockspec.loads_spec(blockspec.dump_spec(spec), registry) == spec
    assert spec_to_dict(spec)["adapters"][0]["targets"] == ["@attention"]


@pytest.mark.parametrize(("entry", "expected"), [
    ({"use": "lora", "targets": ["blocks.*.attn.qkv", "blocks.*.atn.proj"]},
     "$.adapters[0].targets[1]: pattern 'blocks.*.atn.proj' matches no module; the nearest: blocks.1.attn.proj"),
    ({"use": "lora", "targets": ["blocks.0.ln_1"]},
     "$.adapters[0].targets[0]: pattern 'blocks.0.ln_1' matches no module; the nearest:"),
    ({"use": "lora", "targets": ["blocks.*.norm1"]},
     "$.adapters[0].targets[0]: pattern 'blocks.*.norm1' matches no linear layer: blocks.0.norm1 (LayerNorm), "
     "blocks.1.norm1 (LayerNorm); an adapter wraps an nn.Linear"),
    ({"use": "lora", "targets": ["blocks.0.attn.proj"], "rank": 65},
     "$.adapters[0].rank: rank 65 is larger than blocks.0.attn.proj's min(in, out) = min(64, 64)"),
    ({"use": "lora", "targets": ["blocks.0.attn.proj"], "rank": 0},
     "$.adapters[0].rank: expected a positive integer, found 0"),
    ({"use": "lora", "targets": ["@router"]}, "$.adapters[0].targets[0]: role @router names no kind of this model"),
    ({"use": "lora", "targets": []}, "$.adapters[0].targets: expected a non-empty array of module-path patterns"),
    ({"use": "lora", "target": ["blocks.0.attn.proj"]},
     "$.adapters[0].targets: missing required key 'targets'; did you mean 'targets' for 'target'?"),
    ({"use": "lora", "targets": ["blocks.0.attn.proj"], "rnak": 2},
     "$.adapters[0].rnak: unknown key 'rnak'; did you mean 'rank'?"),
    ({"use": "lora", "targets": ["blocks.0.attn.proj"], "alpha": "8"}, "$.adapters[0].alpha: expected"),
    ({"use": "lorra", "targets": ["blocks.0.attn.proj"]}, "$.adapters[0].use: unknown adapter 'lorra'"),
])
def test_a_bad_entry_is_one_line_at_its_path(document, registry, entry, expected):
    found = problems(document, registry, entry)
    assert len(found) == 1 and expected in found[0] and "\n" not in found[0], found


@pytest.mark.parametrize("second", [["blocks.*.attn.qkv"], ["@attention"]])
def test_a_layer_takes_one_adapter(document, registry, second):
    found = problems(document, registry, {"use": "lora", "targets": ["blocks.0.attn.qkv"]},
                     {"use": "dora", "targets": second})
    assert found == ["<spec>: $.adapters[1].targets[0]: blocks.0.attn.qkv is wrapped already, by an earlier "
                     "[[adapters]] entry; each layer takes one adapter: drop it from one of the entries"]


def test_show_lists_the_adapted_layers_and_the_trainable_count(tmp_path, capsys):
    spec = tmp_path / "lora.toml"
    spec.write_text(EXAMPLE.read_text(encoding="utf-8") + '\n[[adapters]]\nuse = "lora"\n'
                    'targets = ["blocks.*.attn.qkv"]\nrank = 4\n', encoding="utf-8")
    assert main(["show", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "blocks.1.attn.qkv  adapter:lora       1,024  blockspec-adapters" in out
    assert "adapter parameters              2,048  (1.86%: what trains with the base frozen)" in out
    assert main(["show", str(spec), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["parameters_adapter"] == 2 * 4 * (64 + 192) and len(shown["adapted"]) == 2
    assert main(["show", str(spec), "--tree"]) == 0
    assert "qkv              LoraLinear           N x 192             13,504  adapter:lora  blockspec-adapters" in \
        capsys.readouterr().out


def test_a_bad_target_on_the_command_line_is_one_line_and_exit_2(tmp_path, capsys):
    spec = tmp_path / "bad.toml"
    spec.write_text(EXAMPLE.read_text(encoding="utf-8") + '\n[[adapters]]\nuse = "lora"\ntargets = ["blocks.*.qkv"]\n',
                    encoding="utf-8")
    assert main(["show", str(spec)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"blockspec: error: {spec}: $.adapters[0].targets[0]: pattern 'blocks.*.qkv' matches no module; "
                   "the nearest: blocks.1.attn.qkv, blocks.0.attn.qkv, blocks.1.ffn.up"], err


def test_a_checkpoint_keeps_its_adapters_and_locks_their_provider(document, registry, tmp_path):
    from blockspec.checkpoint.directory import load, save

    spec = adapted(document, registry, {"use": "dora", "targets": ["blocks.1.ffn.down"], "rank": 2})
    model = trained(blockspec.build(spec, registry=registry, seed=0)).eval()
    save(model, tmp_path / "ckpt")
    loaded = load(tmp_path / "ckpt").eval()
    assert list(loaded.adapted) == ["blocks.1.ffn.down"]
    with torch.no_grad():
        assert torch.equal(loaded(IDS), model(IDS))
    assert '[lock."adapter:dora"]\ndistribution = "blockspec-adapters"' in (tmp_path / "ckpt" / "spec.toml").read_text()
