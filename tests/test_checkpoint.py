"""blockspec's own checkpoint: round trips, the lock, one error for every bad tensor, atomic writes."""

from __future__ import annotations

import os
import shutil
import tomllib
import warnings

import pytest
import torch

import blockspec
from blockspec.checkpoint import atomic
from blockspec.checkpoint import directory as checkpoint
from blockspec.checkpoint.directory import load, read_checkpoint_manifest, read_extra_file, save
from blockspec.errors import CheckpointError
from blockspec.checkpoint.lock import LockMismatchWarning

from .weights_helpers import edit_weights, gpt2_spec, llama_spec, randomized, resign

IDS = torch.randint(0, 97, (2, 11), generator=torch.Generator().manual_seed(0))


@pytest.fixture
def gpt2(registry):
    return randomized(blockspec.build(gpt2_spec(registry), registry=registry, seed=0))


@pytest.fixture
def saved(gpt2, tmp_path):
    return save(gpt2, tmp_path / "ckpt")


def assert_same_model(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    with torch.no_grad():
        assert torch.equal(a.eval()(IDS), b.eval()(IDS))


@pytest.mark.parametrize("tied", [True, False])
def test_round_trip_is_exact_and_keeps_the_tie(registry, tmp_path, tied):
    model = randomized(blockspec.build(gpt2_spec(registry, tied=tied), registry=registry, seed=1))
    loaded = load(save(model, tmp_path / "c"), registry=registry)
    assert loaded.training  # like build: PyTorch's rule for a constructed module
    assert_same_model(model, loaded)
    assert (loaded.head.weight is loaded.embedding.weight) == tied
    assert loaded.spec == model.spec


def test_tied_head_is_stored_once(saved):
    tensors = read_checkpoint_manifest(saved).tensors
    assert "embedding.weight" in tensors and "head.weight" not in tensors


def test_bfloat16_and_gqa_round_trip_keep_dtype(registry, tmp_path):
    model = randomized(blockspec.build(llama_spec(registry, kv=1, bias=True), registry=registry, seed=2))
    model = model.to(torch.bfloat16)
    loaded = load(save(model, tmp_path / "c"), registry=registry)
    assert next(loaded.parameters()).dtype == torch.bfloat16
    assert_same_model(model, loaded)


def test_mixed_float_dtypes_load_cast_into_a_float32_model(saved, gpt2, registry):
    """Tensors whose dtype is the model's are read straight into it; the others are cast on the way in."""
    def half_the_norms(tensors):
        return {k: v.half() if ".norm" in k else v for k, v in tensors.items()}

    edit_weights(saved, half_the_norms)
    resign(saved)
    loaded = load(saved, registry=registry)
    assert next(loaded.parameters()).dtype == torch.float32
    for name, tensor in loaded.state_dict().items():
        expected = gpt2.state_dict()[name]
        assert torch.equal(tensor, expected.half().float() if ".norm" in name else expected), name


def test_spec_toml_records_a_lock_per_component(saved, gpt2):
    lock = tomllib.loads((saved / "spec.toml").read_text())["lock"]
    for component in gpt2.provenance.values():
        locked = lock[f"{component.kind}:{component.name}"]
        assert locked == {"distribution": component.distribution, "version": component.version}


def test_extra_metadata_and_files_round_trip_verified(gpt2, tmp_path):
    path = save(gpt2, tmp_path / "c", extra={"step": 7, "note": "ok"},
                extra_files={"tokenizer.json": b'{"v": 1}', "train/optimizer.bin": b"\x00\x01"})
    assert read_checkpoint_manifest(path).extra == {"step": 7, "note": "ok"}
    assert read_extra_file(path, "train/optimizer.bin") == b"\x00\x01"
    (path / "tokenizer.json").write_bytes(b'{"v": 2}')
    with pytest.raises(CheckpointError, match="tokenizer.json: sha256 differs"):
        read_extra_file(path, "tokenizer.json")


@pytest.mark.parametrize("name", ["../escape", "/abs", "a/b/c", ".hidden", "spec.toml", "manifest.json", ""])
def test_unsafe_or_reserved_extra_file_names_are_refused(gpt2, tmp_path, name):
    with pytest.raises(CheckpointError, match="extra_files"):
        save(gpt2, tmp_path / "c", extra_files={name: b"x"})
    assert not (tmp_path / "c").exists()


def test_non_json_extra_is_refused(gpt2, tmp_path):
    with pytest.raises(CheckpointError, match="JSON"):
        save(gpt2, tmp_path / "c", extra={"tensor": torch.zeros(1)})


# ---------------------------------------------------------------- one error naming every bad tensor


def test_dropped_extra_and_misshaped_tensors_are_all_named_in_one_error(saved, registry):
    def change(tensors):
        del tensors["blocks.0.ffn.down.weight"]
        tensors["blocks.9.surprise"] = torch.zeros(3)
        tensors["blocks.1.attn.qkv.weight"] = tensors["blocks.1.attn.qkv.weight"][:, :-1].contiguous()
        return tensors

    edit_weights(saved, change)
    resign(saved)
    with pytest.raises(CheckpointError) as caught:
        load(saved, registry=registry)
    lines = str(caught.value).splitlines()
    assert len(lines) == 3
    assert any("'blocks.0.ffn.down.weight'" in ln and "missing" in ln for ln in lines)
    assert any("'blocks.9.surprise'" in ln and "unexpected" in ln for ln in lines)
    assert any("'blocks.1.attn.qkv.weight' (attention:causal from blockspec)" in ln and "[96, 31]" in ln
               for ln in lines)


def test_a_transposed_square_matrix_is_caught_and_named(saved, registry):
    name = "blocks.0.attn.proj.weight"
    edit_weights(saved, lambda t: {**t, name: t[name].t().contiguous()})
    with pytest.raises(CheckpointError) as caught:
        load(saved, registry=registry)
    message = str(caught.value)
    assert "model.safetensors: sha256 differs from the manifest" in message
    assert f"tensor {name!r}: dtype, shape or bytes differ" in message and message.count("tensor '") == 1


def test_a_truncated_weights_file_is_refused_naming_the_file(saved, registry):
    path = saved / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="model.safetensors: .*truncated"):
        load(saved, registry=registry)


def test_a_missing_component_names_its_locked_distribution(saved, registry):
    spec = saved / "spec.toml"
    text = spec.read_text().replace('use = "learned"', 'use = "missingpos"')
    text = text.replace('[lock."positional:learned"]\ndistribution = "blockspec-positional"\nversion = "0.1.0"',
                        '[lock."positional:missingpos"]\ndistribution = "blockspec-missingpos"\nversion = "2.1"')
    spec.write_text(text)
    resign(saved)
    with pytest.raises(CheckpointError, match=r"positional 'missingpos' is not installed; .*blockspec-missingpos 2\.1 "
                                              r"\(pip install 'blockspec-missingpos==2\.1'\)"):
        load(saved, registry=registry)


def test_another_version_only_warns(saved, registry):
    spec = saved / "spec.toml"
    spec.write_text(spec.read_text().replace('distribution = "blockspec-norms"\nversion = "0.1.0"',
                                             'distribution = "blockspec-norms"\nversion = "0.0.9"'))
    resign(saved)
    with pytest.warns(LockMismatchWarning, match="norm:layernorm was saved with blockspec-norms 0.0.9"):
        load(saved, registry=registry)


def test_not_a_checkpoint(tmp_path, registry):
    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        load(tmp_path / "nothing", registry=registry)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="manifest.json: cannot read the manifest"):
        load(tmp_path / "empty", registry=registry)


def test_a_model_without_spec_cannot_be_saved(tmp_path):
    with pytest.raises(CheckpointError, match="no spec"):
        save(torch.nn.Linear(2, 2), tmp_path / "c")


# ---------------------------------------------------------------- atomic writes


def test_replacing_an_existing_checkpoint(saved, registry, gpt2):
    other = randomized(blockspec.build(gpt2.spec, registry=registry), seed=5)
    save(other, saved, overwrite=True)
    assert_same_model(other, load(saved, registry=registry))
    assert sorted(p.name for p in saved.parent.iterdir()) == ["ckpt"]  # no temporary left behind


def test_a_foreign_directory_is_never_replaced(gpt2, tmp_path):
    precious = tmp_path / "photos"
    precious.mkdir()
    (precious / "cat.jpg").write_bytes(b"meow")
    with pytest.raises(CheckpointError, match="not a blockspec checkpoint; refusing"):
        save(gpt2, precious)
    assert (precious / "cat.jpg").read_bytes() == b"meow"


class Crash(Exception):
    pass


FS_CALLS = [(os, "fsync"), (os, "rename"), (atomic, "exchange"), (shutil, "rmtree"), (checkpoint, "write_file")]


def crash_after(monkeypatch, budget: int) -> list[str]:
    """Make the ``budget``-th file-system step raise, as if the process died right there."""
    calls: list[str] = []
    for owner, name in FS_CALLS:
        real = getattr(owner, name)

        def wrapper(*args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            if len(calls) == budget:
                raise Crash(f"killed at step {budget} ({_name})")
            return _real(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)
    return calls


@pytest.mark.parametrize("exchange_works", [True, False])
def test_a_kill_at_any_step_leaves_the_old_or_the_new_checkpoint(gpt2, registry, tmp_path, monkeypatch,
                                                                   exchange_works):
    new = randomized(blockspec.build(gpt2.spec, registry=registry), seed=9)
    if not exchange_works:
        monkeypatch.setattr(atomic, "exchange", lambda first, second: False)
    with monkeypatch.context() as probe:  # count the steps of one clean save
        steps = crash_after(probe, budget=-1)
        save(gpt2, tmp_path / "count")
    outcomes = set()
    for budget in range(1, len(steps) + 1):
        target = tmp_path / f"c{budget}"
        save(gpt2, target)
        with monkeypatch.context() as patch:
            crash_after(patch, budget)
            with pytest.raises(Crash):
                save(new, target, overwrite=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = load(target, registry=registry)
        is_old = torch.equal(loaded.embedding.weight, gpt2.embedding.weight)
        is_new = torch.equal(loaded.embedding.weight, new.embedding.weight)
        assert is_old or is_new, f"step {budget}: neither checkpoint"
        assert_same_model(gpt2 if is_old else new, loaded)
        outcomes.add("old" if is_old else "new")
    assert len(steps) >= 5 and outcomes <= {"old", "new"}
    assert "old" in outcomes


def test_staging_left_by_a_killed_writer_is_removed_by_the_next_save(gpt2, registry, tmp_path):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    target = tmp_path / "ckpt"
    stale = tmp_path / f".ckpt.tmp-{dead.stdout.strip()}-abc"
    live = tmp_path / f".ckpt.tmp-{os.getpid()}-xyz"  # a writer still running keeps its staging
    for folder in (stale, live):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"partial")
    save(gpt2, target)
    assert not stale.exists() and live.exists()
    assert torch.equal(load(target, registry=registry).embedding.weight, gpt2.embedding.weight)
