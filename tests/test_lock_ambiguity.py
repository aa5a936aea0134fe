"""A name two distributions provide: checkpoints settle it from their [lock]; list and doctor warn."""

from __future__ import annotations

import pytest
import torch
from attrs import frozen

import blockspec
from blockspec.checkpoint.directory import load, load_spec_of, save
from blockspec.cli import doctor_cmd, list_cmd, main, show_cmd
from blockspec.errors import CheckpointError, SpecError
from blockspec.registry.components import Component, Registry
from blockspec.generation.tokens import generate

from .weights_helpers import LLAMA_TEXT, llama_spec, randomized


@frozen(kw_only=True)
class EpsConfig:
    eps: float = 1e-6


def build_identity(config, ctx):
    return torch.nn.Identity()  # no weights: loading with this provider would fail the weights check


def plugin_rmsnorm(distribution: str) -> Component:
    return Component(kind="norm", name="rmsnorm", config_cls=EpsConfig, build=build_identity,
                     distribution=distribution, version="1.0")


def with_duplicate(registry: Registry, *extra: Component, drop: str | None = None) -> Registry:
    kept = [c for c in registry if not (drop and c.kind == "norm" and c.name == "rmsnorm" and c.distribution == drop)]
    return Registry.of([*kept, *extra])


@pytest.fixture
def saved(registry, tmp_path):
    model = randomized(blockspec.build(llama_spec(registry), registry=registry, seed=0))
    return model, save(model, tmp_path / "ckpt")


def test_ambiguous_lists_each_name_with_two_providers(registry):
    assert registry.ambiguous() == []
    both = with_duplicate(registry, plugin_rmsnorm("zzz-norms"))
    assert both.ambiguous() == [("norm", "rmsnorm", ("blockspec-norms", "zzz-norms"))]


def test_an_unpinned_spec_stays_ambiguous_without_a_lock(registry):
    both = with_duplicate(registry, plugin_rmsnorm("zzz-norms"))
    with pytest.raises(SpecError, match="provided by blockspec-norms and zzz-norms"):
        llama_spec(both)


def test_a_checkpoint_saved_before_the_plugin_loads_with_its_locked_provider(registry, saved):
    model, path = saved
    both = with_duplicate(registry, plugin_rmsnorm("zzz-norms"))
    loaded = load(path, registry=both)
    assert loaded.provenance["blocks.0.norm1"].distribution == "blockspec-norms"
    ids = torch.randint(0, 97, (1, 7), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(loaded(ids), model(ids), rtol=0, atol=0)
    assert generate(loaded, ids, max_new_tokens=5, temperature=0).shape == (1, 12)  # generate's code path
    assert load_spec_of(path, both).norm.distribution == "blockspec-norms"  # show's code path
    resaved = save(loaded, path.parent / "again")  # pinned now, so it loads without the lock's help too
    assert 'use = "blockspec-norms:rmsnorm"' in (resaved / "spec.toml").read_text()
    load(resaved, registry=both)


def test_show_command_reads_the_checkpoint(registry, saved, monkeypatch, capsys):
    _, path = saved
    both = with_duplicate(registry, plugin_rmsnorm("zzz-norms"))
    monkeypatch.setattr(show_cmd, "registry_with_warnings", lambda **_: both)
    assert main(["show", str(path)]) == 0
    assert "rmsnorm" in capsys.readouterr().out


def test_a_locked_provider_that_is_not_installed_fails_in_one_line(registry, saved):
    _, path = saved
    others = with_duplicate(registry, plugin_rmsnorm("aaa-norms"), plugin_rmsnorm("zzz-norms"),
                            drop="blockspec-norms")
    with pytest.raises(CheckpointError) as caught:
        load(path, registry=others)
    message = str(caught.value)
    assert "\n" not in message
    assert "norm 'rmsnorm' is provided by aaa-norms and zzz-norms, but the checkpoint was saved with " \
           "blockspec-norms 0.1.0, which is not installed (pip install 'blockspec-norms==0.1.0')" in message


@pytest.mark.parametrize("command", [list_cmd, doctor_cmd], ids=["list", "doctor"])
def test_list_and_doctor_warn_about_a_name_with_two_providers(registry, monkeypatch, capsys, command):
    both = with_duplicate(registry, plugin_rmsnorm("zzz-norms"))
    monkeypatch.setattr(command, "registry_with_warnings", lambda **_: both)
    assert main([command.__name__.rpartition(".")[2].removesuffix("_cmd")]) == 0
    err = capsys.readouterr().err
    assert err.count("warning") == 1
    assert "norm 'rmsnorm' is provided by blockspec-norms and zzz-norms" in err


LAYERED = {  # a per-layer component: another one (use), or the model-wide one with other fields
    "use": LLAMA_TEXT.format(kv=2, bias="false", tied="false", layout="half").replace('use = "rmsnorm"',
                                                                                     'use = "layernorm"')
    + '\n[[layers]]\nindex = [1]\nnorm = { use = "rmsnorm" }\n',
    "fields": LLAMA_TEXT.format(kv=2, bias="false", tied="false", layout="half")
    + "\n[[layers]]\nindex = [1]\nnorm = { eps = 1e-5 }\n",
}


@pytest.mark.parametrize("layered", LAYERED, ids=LAYERED)
def test_a_checkpoint_with_layers_loads_with_its_locked_per_layer_provider(registry, tmp_path, layered):
    """Bug 4: the lock settles the name in every layer, not only in the model-wide tables."""
    model = randomized(blockspec.build(blockspec.loads_spec(LAYERED[layered], registry), registry=registry, seed=0))
    path = save(model, tmp_path / "ckpt")
    both = with_duplicate(registry, plugin_rmsnorm("zzz-norms"))
    loaded = load(path, registry=both)
    assert loaded.provenance["blocks.1.norm1"].distribution == "blockspec-norms"
    ids = torch.randint(0, 97, (1, 7), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(loaded(ids), model(ids), rtol=0, atol=0)
    assert loaded.spec.layer(1).norm.distribution == "blockspec-norms"  # pinned, so a re-save needs no lock
    load(save(loaded, tmp_path / "again"), registry=both)
