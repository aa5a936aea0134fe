"""import-hf, export-hf, and show on checkpoints: lines and exit 2 on error, never a traceback.

The Hugging Face directories here are written by blockspec's own exporter, so these tests
need no ``transformers`` (the parity tests check the exporter against it).
"""

from __future__ import annotations

import json

import pytest
import torch

import blockspec
from blockspec.checkpoint.directory import load, read_checkpoint_manifest
from blockspec.interop import export_hf

from .weights_helpers import gpt2_spec, llama_spec, randomized
from .cli_run import run


@pytest.fixture
def hf_llama(registry, tmp_path):
    model = randomized(blockspec.build(llama_spec(registry, kv=2, tied=True), registry=registry), seed=6)
    directory = export_hf(model, tmp_path / "hf")
    (directory / "tokenizer.json").write_text('{"model": "bpe"}')
    return model, directory


def test_import_show_export_round_trip(capsys, tmp_path, hf_llama):
    model, source = hf_llama
    code, out, err = run(capsys, "import-hf", source, "--out", tmp_path / "ckpt")
    assert code == 0, err
    assert "hf/tokenizer.json" in out and "hf/config.json" in out
    assert set(read_checkpoint_manifest(tmp_path / "ckpt").files) >= {"hf/config.json", "hf/tokenizer.json"}
    code, out, err = run(capsys, "show", tmp_path / "ckpt")
    assert code == 0 and "positional:rope" in out and "total parameters" in out
    code, out, err = run(capsys, "export-hf", tmp_path / "ckpt", "--out", tmp_path / "back")
    assert code == 0, err
    assert json.loads((tmp_path / "back" / "tokenizer.json").read_text()) == {"model": "bpe"}
    assert (tmp_path / "back" / "model.safetensors").read_bytes() == (source / "model.safetensors").read_bytes()
    ids = torch.randint(0, 97, (1, 9))
    with torch.no_grad():
        assert torch.equal(load(tmp_path / "ckpt")(ids), model(ids))


def test_show_accepts_a_hugging_face_directory(capsys, hf_llama):
    code, out, err = run(capsys, "show", hf_llama[1], "--json")
    assert code == 0, err
    assert json.loads(out)["parameters"] == sum(p.numel() for p in hf_llama[0].parameters())


def test_import_dtype_conversion(capsys, tmp_path, hf_llama):
    code, _, err = run(capsys, "import-hf", hf_llama[1], "--out", tmp_path / "c", "--dtype", "bfloat16")
    assert code == 0, err
    assert next(load(tmp_path / "c").parameters()).dtype == torch.bfloat16


def test_export_refuses_an_existing_export_without_force_and_any_other_directory_always(capsys, tmp_path, registry):
    model = randomized(blockspec.build(gpt2_spec(registry), registry=registry))
    blockspec.save(model, tmp_path / "ckpt")
    assert run(capsys, "export-hf", tmp_path / "ckpt", "--out", tmp_path / "out")[0] == 0
    code, _, err = run(capsys, "export-hf", tmp_path / "ckpt", "--out", tmp_path / "out")
    assert code == 2 and "already exists; pass --force to replace it" in err
    assert run(capsys, "export-hf", tmp_path / "ckpt", "--out", tmp_path / "out", "--force")[0] == 0
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("x")
    for force in ([], ["--force"]):
        code, _, err = run(capsys, "export-hf", tmp_path / "ckpt", "--out", tmp_path / "mine", *force)
        assert code == 2 and "is not a Hugging Face export; refusing to replace it" in err, err
    assert (tmp_path / "mine" / "keep.txt").read_text() == "x"


def test_export_of_a_model_hugging_face_cannot_hold_says_why(capsys, tmp_path, registry):
    text = blockspec.dump_spec(gpt2_spec(registry)).replace('use = "learned"', 'use = "sinusoidal"')
    spec = blockspec.loads_spec(text, registry)
    blockspec.save(blockspec.build(spec, registry=registry), tmp_path / "ckpt")
    code, _, err = run(capsys, "export-hf", tmp_path / "ckpt", "--out", tmp_path / "out")
    assert code == 2
    assert "as GPT-2: positional is 'sinusoidal', expected 'learned'" in err
    assert "as Llama: positional is 'sinusoidal', expected 'rope'" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [
    ("import-hf", "{tmp}/missing", "--out", "{tmp}/c"),
    ("export-hf", "{tmp}/missing", "--out", "{tmp}/c"),
    ("show", "{tmp}"),
])
def test_errors_are_lines_with_exit_2(capsys, tmp_path, argv):
    code, out, err = run(capsys, *(a.format(tmp=tmp_path) for a in argv))
    assert code == 2 and err.startswith("blockspec: error: ") and "Traceback" not in err


def test_sources_load_any_of_spec_checkpoint_and_hugging_face_directory(tmp_path, registry, hf_llama):
    from blockspec.errors import CheckpointError
    from blockspec.sources import load_model, load_spec_or_checkpoint

    model, hf_dir = hf_llama
    checkpoint = blockspec.save(model, tmp_path / "ckpt")
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(blockspec.dump_spec(model.spec))
    ids = torch.randint(0, 97, (1, 7))
    with torch.no_grad():
        for source in (checkpoint, hf_dir):
            assert torch.allclose(load_model(source, registry)(ids), model(ids), atol=1e-6)
        assert load_model(spec_file, registry, seed=3).spec == model.spec
    assert load_spec_or_checkpoint(checkpoint, registry) == model.spec
    assert load_spec_or_checkpoint(spec_file, registry) == model.spec
    with pytest.raises(CheckpointError, match="neither a blockspec checkpoint"):
        load_spec_or_checkpoint(tmp_path, registry)


def test_trace_runs_on_an_imported_checkpoint_with_its_weights(capsys, tmp_path, hf_llama):
    model, source = hf_llama
    assert run(capsys, "import-hf", source, "--out", tmp_path / "broken")[0] == 0
    code, _, err = run(capsys, "trace", tmp_path / "broken", "--ids", "5,7,11")  # its tokenizer spells the ids
    assert code == 2 and "hf/tokenizer.json: not a Hugging Face tokenizer" in err and len(err.splitlines()) == 1
    (source / "tokenizer.json").unlink()  # the fixture's stands in for one and cannot be read
    assert run(capsys, "import-hf", source, "--out", tmp_path / "ckpt")[0] == 0
    code, out, err = run(capsys, "trace", tmp_path / "ckpt", "--ids", "5,7,11", "--stage", "logits", "--json")
    assert code == 0, err
    data = json.loads(out)
    traced = torch.tensor(data["stages"][0]["values"])
    with torch.no_grad():
        expected = model(torch.tensor([[5, 7, 11]]))[0]
    assert torch.allclose(traced, expected, atol=1e-5)
    assert str(tmp_path / "ckpt") in json.dumps(data)  # reported as the weights' source
