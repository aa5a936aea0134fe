"""Every SPEC is a spec file, a checkpoint or a Hugging Face directory; the Python API's edges.

Issue 17, findings 5 and 11: one resolver (``blockspec.sources``) behind every
command and ``blockspec.load``; clear errors for 1-D and out-of-vocabulary ids; paths in
``count_parameters``; one mode rule (training mode) for ``build`` and ``load``.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch

import blockspec
from blockspec.checkpoint.directory import read_checkpoint_manifest
from blockspec.cli import main
from blockspec.interop import export_hf
from blockspec.sources import load_model, load_spec_or_checkpoint, tokenizer_of
from blockspec.spec.convert import spec_to_dict

from .corpus import small_play
from .specs import spec_text
from .weights_helpers import llama_spec, randomized
from .cli_run import run

SPEC = spec_text(name="micro", vocab_size=64, context_length=32, d_model=32, n_layers=2, n_heads=4, d_ff=64,
                 positional="learned")
FAST = ["--batch-size", "8", "--eval-batches", "2", "--lr", "1e-2", "--quiet"]


@pytest.fixture
def sources(tmp_path, registry, capsys):
    """A spec file, a training checkpoint of it (2 steps) and a Hugging Face directory."""
    (tmp_path / "micro.toml").write_text(SPEC)
    (tmp_path / "play.txt").write_text(small_play())
    code = main(["train", str(tmp_path / "micro.toml"), "--data", str(tmp_path / "play.txt"), *FAST,
                 "--steps", "2", "--out", str(tmp_path / "ckpt")])
    assert code == 0, capsys.readouterr().err
    model = randomized(blockspec.build(llama_spec(registry, kv=2, tied=True), registry=registry), seed=6)
    export_hf(model, tmp_path / "hf")
    capsys.readouterr()
    return tmp_path


def state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ---------------------------------------------------------------- finding 5: every SPEC takes every source


def test_check_takes_a_checkpoint_its_spec_toml_and_a_hugging_face_directory(capsys, sources):
    code, out, err = run(capsys, "check", sources / "micro.toml", sources / "ckpt", sources / "ckpt" / "spec.toml",
                         sources / "hf", "--json")
    assert code == 0, err
    reports = json.loads(out)
    assert [r["ok"] for r in reports] == [True] * 4
    assert reports[0]["parameters"] == reports[1]["parameters"] == reports[2]["parameters"]
    assert reports[3]["parameters"] > 0


def test_a_lock_naming_a_missing_component_fails_check_in_one_line(capsys, sources, tmp_path):
    text = (sources / "ckpt" / "spec.toml").read_text()
    broken = tmp_path / "locked.toml"
    broken.write_text(text + '\n[lock."norm:nowhere"]\ndistribution = "blockspec-nowhere"\nversion = "1.0"\n')
    code, out, err = run(capsys, "check", broken, sources / "micro.toml", "--json")
    assert code == 2
    reports = json.loads(out)
    assert [r["ok"] for r in reports] == [False, True]
    problem = reports[0]["problems"][0]
    assert "blockspec-nowhere" in f"{problem['message']} {problem['hint']}"  # the hint names what to install
    assert err.startswith("blockspec: error: ") and "Traceback" not in err


def test_a_spec_file_with_a_lock_reads_like_the_checkpoint(registry, sources):
    assert load_spec_or_checkpoint(sources / "ckpt" / "spec.toml", registry) == load_spec_or_checkpoint(
        sources / "ckpt", registry)
    with pytest.raises(blockspec.SpecError, match=r"\$\.lock: unknown table"):
        blockspec.load_spec(sources / "ckpt" / "spec.toml", registry)  # the bare reader stays strict


def test_train_resume_takes_the_checkpoint_as_its_spec(capsys, sources):
    code, out, err = run(capsys, "train", sources / "ckpt", "--data", sources / "play.txt", *FAST, "--steps", "3",
                         "--resume", sources / "ckpt", "--json")
    assert code == 0, err
    assert json.loads(out)["steps"] == 3


def test_train_on_a_checkpoint_fine_tunes_from_its_weights_and_tokenizer(capsys, sources, registry):
    code, _, err = run(capsys, "train", sources / "ckpt", "--data", sources / "play.txt", *FAST, "--steps", "0",
                       "--out", sources / "tuned")
    assert code == 0, err
    before, after = blockspec.load(sources / "ckpt"), blockspec.load(sources / "tuned")
    assert all(torch.equal(a, b) for a, b in zip(state(before).values(), state(after).values(), strict=True))
    assert tokenizer_of(sources / "tuned") == tokenizer_of(sources / "ckpt")
    assert read_checkpoint_manifest(sources / "tuned").extra["step"] == 0  # a new run, not a resumed one


def test_train_on_a_hugging_face_directory_starts_from_its_weights(capsys, sources, registry):
    code, _, err = run(capsys, "train", sources / "hf", "--data", sources / "play.txt", *FAST, "--steps", "0",
                       "--out", sources / "tuned")
    assert code == 0, err
    before, after = blockspec.load(sources / "hf"), blockspec.load(sources / "tuned")
    assert all(torch.equal(a, b) for a, b in zip(state(before).values(), state(after).values(), strict=True))


# ---------------------------------------------------------------- finding 11: the Python API's edges


@pytest.fixture
def tiny(example_spec, registry):
    return blockspec.build(example_spec("tiny-shakespeare"), registry=registry, seed=0)


def test_one_dimensional_ids_ask_for_a_batch_dimension(tiny):
    with pytest.raises(blockspec.InputError, match=r"expected token ids of shape \(B, N\), found shape \(3,\); "
                                                   r"add a batch dimension: ids\[None\]"):
        tiny(torch.tensor([1, 2, 3]))
    assert tiny(torch.tensor([1, 2, 3])[None]).shape == (1, 3, 65)


@pytest.mark.parametrize("bad", [65, 1000, -1])
def test_an_id_outside_the_vocabulary_is_named(tiny, bad):
    with pytest.raises(blockspec.TokenIdError, match=rf"token id {bad} is outside the vocabulary: .*0\.\.64") as info:
        tiny(torch.tensor([[1, bad, 2]]))
    assert isinstance(info.value, IndexError) and isinstance(info.value, ValueError)
    assert isinstance(info.value, blockspec.BlockspecError)


def test_the_id_check_keeps_the_compiled_graph_whole(tiny):
    torch._dynamo.reset()
    compiled = torch.compile(tiny, fullgraph=True, backend="eager")
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(compiled(ids), tiny(ids))


def test_count_parameters_takes_a_path_or_a_spec(example_spec, registry, tmp_path):
    path = "examples/specs/tiny-shakespeare.toml"
    expected = blockspec.count_parameters(example_spec("tiny-shakespeare"), registry)
    assert blockspec.count_parameters(path) == expected
    from pathlib import Path

    assert blockspec.count_parameters(Path(path), registry) == expected
    with pytest.raises(TypeError, match="expected a ModelSpec or the path of a spec file .*found dict"):
        blockspec.count_parameters({"model": {}})
    with pytest.raises(blockspec.SpecError, match="a directory; .*load_spec_or_checkpoint"):
        blockspec.count_parameters(tmp_path)


def test_load_reads_any_source_with_weights(sources, registry):
    hf = blockspec.load(sources / "hf")  # no registry: the default one
    assert isinstance(hf, blockspec.Transformer)
    ckpt = blockspec.load(sources / "ckpt")
    assert spec_to_dict(ckpt.spec) == spec_to_dict(load_spec_or_checkpoint(sources / "ckpt"))
    with pytest.raises(blockspec.CheckpointError, match=r"a spec file holds no weights; .*blockspec\.build"):
        blockspec.load(sources / "micro.toml")
    assert torch.equal(load_model(sources / "hf")(torch.tensor([[1, 2]])), hf(torch.tensor([[1, 2]])))


def test_build_and_load_both_return_training_mode(sources, registry, tiny):
    """One rule, PyTorch's: a module is made in training mode; ``.eval()`` before inference."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        models = [tiny, blockspec.load(sources / "ckpt"), blockspec.load(sources / "hf"),
                  load_model(sources / "micro.toml"), blockspec.checkpoint.directory.load(sources / "ckpt")]
    assert all(model.training for model in models)
    assert all(module.training for model in models for module in model.modules())
