"""Issue 17, findings 3 and 12: user input that reached "internal error", and small things a user trips on.

Every refusal here is one `blockspec: error:` line with exit 2 (the sweep in test_cli_sweep.py
draws the hostile inputs at random; these are the reported ones, pinned)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch


from .cli_assets import FAST, SPECS, TINY
from .cli_run import run

ROOT = Path(__file__).resolve().parents[1]


def one_error(code: int, err: str) -> str:
    """The one line of a refusal, without its prefix."""
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("blockspec: error: "), err
    return lines[0].removeprefix("blockspec: error: ")


# -- finding 3: internal errors on user input -------------------------------------------------------------


@pytest.mark.parametrize(("extra", "flag"), [
    (["--prompt", ""], "--prompt"),
    (["--prompt", "to", "--temperature", "-1"], "--temperature"),
    (["--prompt", "to", "--top-k", "0"], "--top-k"),
    (["--prompt", "to", "--max-new-tokens", "-3"], "--max-new-tokens"),
    (["--prompt", "to", "--device", "tpu"], "--device"),
])
def test_reported_generate_inputs_are_one_line(capsys, assets, extra, flag):
    assert one_error(*run(capsys, "generate", assets.ckpt, *extra)[::2]).startswith(flag)


def test_generate_and_train_on_cuda_without_cuda(capsys, assets, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for argv in (["generate", assets.ckpt, "--prompt", "to"], ["train", assets.spec, "--data", assets.data]):
        assert "no CUDA device" in one_error(*run(capsys, *argv, "--device", "cuda")[::2])


@pytest.mark.parametrize("plot", ["x.jpgg", "specs"])
def test_train_refuses_a_plot_without_a_known_suffix_up_front(capsys, assets, tmp_path, monkeypatch, plot):
    monkeypatch.chdir(tmp_path)
    line = one_error(*run(capsys, "train", assets.spec, "--data", assets.data, "--device", "tpu", "--plot", plot)[::2])
    assert line.startswith("--device")  # the device first, then the plot, both before any data
    line = one_error(*run(capsys, "train", assets.spec, "--data", assets.data, "--plot", plot)[::2])
    assert line == f"--plot: expected a file ending in .png, .svg, .pdf, found {plot!r}"
    assert not (tmp_path / f"{plot}.png").exists()


def test_train_refuses_a_classifier_head_up_front(capsys, assets, tmp_path, monkeypatch):
    from blockspec.train.loop import Trainer

    def no_trainer(*args, **kwargs):
        raise AssertionError("the refusal comes before a Trainer is made")

    monkeypatch.setattr(Trainer, "__init__", no_trainer)
    spec = tmp_path / "classifier.toml"
    spec.write_text(assets.spec.read_text().replace('[head]\nuse = "lm"', '[head]\nuse = "classifier"\nn_classes = 3'))
    line = one_error(*run(capsys, "train", spec, "--data", assets.data, "--steps", "1", *FAST)[::2])
    assert line.startswith(f"{spec}: $.head.use: training needs a language-model head")
    assert "'classifier'" in line and 'use = "lm"' in line


def test_the_trainer_refuses_a_classifier_head_too(registry, assets, tmp_path):
    import blockspec
    from blockspec.data.dataset import CharDataset
    from blockspec.train.loop import NotALanguageModelError, Trainer, make_config

    text = assets.spec.read_text().replace('[head]\nuse = "lm"', '[head]\nuse = "classifier"\nn_classes = 3')
    model = blockspec.build(blockspec.loads_spec(text, registry), registry=registry)
    with pytest.raises(NotALanguageModelError, match=r"\$\.head\.use: training needs a language-model head"):
        Trainer(model, CharDataset.from_file(assets.data), make_config({}))


def test_explore_out_an_existing_folder_is_one_line(capsys, assets, tmp_path):
    line = one_error(*run(capsys, "explore", TINY, "--ids", "1,2", "--out", tmp_path, "--device", "cpu")[::2])
    assert line == f"--out: {tmp_path}: is a directory; expected a file name"
    line = one_error(*run(capsys, "explore", assets.spec, "--ids", "1,2", "--out", assets.spec)[::2])
    assert line.startswith("--out: ") and "refusing to write over the input" in line


HUGE = "99999999999999999999999"


@pytest.mark.parametrize(("argv", "start"), [
    (["trace", TINY, "--ids", "1", "--seed", HUGE], "--seed: expected an integer from"),
    (["generate", "{ckpt}", "--prompt", "to", "--seed", HUGE], "--seed: expected an integer from"),
    (["train", "{spec}", "--data", "{data}", "--seed", HUGE], "--seed: expected an integer from"),
    (["train", "{spec}", "--data", "{data}", "--threads", HUGE], "--threads: expected an integer from 1 to 1024"),
    (["generate", "{ckpt}", "--prompt", "to", "--max-new-tokens", HUGE], "--max-new-tokens: expected an integer"),
    (["train", "{spec}", "--data", "{data}", "--steps", "1", "--batch-size", "10" * 7],
     "--batch-size: expected an integer from 1 to 1_048_576"),  # bounded before anything is sized by it
    (["train", "{spec}", "--data", "{data}", "--steps", "1", "--batch-size", "1048576"], "{spec}: training with"),
    (["generate", "{char}", "--prompt", "to", "--overflow", "error", "--max-new-tokens", "80"], "a prompt of 2"),
    (["explore", TINY, "--ids", "1", "--out=--"], "--out: expected one value, found '--'"),
    (["show", "a\x00b"], "'a\\x00b': contains a NUL character"),
    (["check", "sp\nec.toml"], "sp"),
])
def test_what_the_sweep_found_is_one_line(capsys, assets, argv, start):
    fill = {"spec": assets.spec, "data": assets.data, "ckpt": assets.ckpt, "char": assets.char_ckpt}
    argv = [str(a).format(**fill) for a in argv]
    code, _, err = run(capsys, *argv, *(["--device", "cpu"] if argv[0] in ("trace", "generate", "train") else []))
    if argv[0] == "check":  # a line break in a file name: every line still carries the prefix
        assert code == 2 and all(line.startswith("blockspec: error: ") for line in err.splitlines()), err
        return
    line = one_error(code, err)
    assert line.startswith(start.format(**fill)), line
    assert "overflow=" not in line  # the generate flag, not the library parameter


# -- finding 12: small things ----------------------------------------------------------------------------


def test_trace_names_the_chapter_behind_its_sections(capsys):
    code, out, _ = run(capsys, "trace", TINY, "--ids", "1,2", "--device", "cpu", "--top", "0")
    assert code == 0
    assert 'chapter 7, "Transformer Architecture"' in out and "docs/chapter-claims.md" in out
    assert '"Transformer Architecture"' in (ROOT / "docs" / "trace.md").read_text()


def test_gpt2_medium_is_headed_medium():
    header = (SPECS / "gpt2-medium.toml").read_text().splitlines()[0]
    assert header.startswith("# GPT-2 medium (355M)")


def test_version_is_one_line_without_torch(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("blockspec ") and "Python " in out and "torch " in out
    probe = "import sys; from blockspec.cli import main; main(['--version']); print('torch' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert shown.splitlines()[-1] == "False"


def test_registry_after_the_subcommand_means_the_same(capsys, tmp_path):
    missing = tmp_path / "nowhere.toml"
    before = run(capsys, "--registry", missing, "list")
    after = run(capsys, "list", "--registry", missing)
    assert before == after and "cannot read registry file" in one_error(before[0], before[2])
    policy = tmp_path / "only-norms.toml"
    policy.write_text('[policy]\nload = "allowed"\nallow = ["blockspec-norms"]\n')
    code, out, err = run(capsys, "list", "--json", "--registry", policy)
    assert code == 0, err
    loaded = {r["distribution"] for r in json.loads(out)}
    assert "blockspec-norms" in loaded and "blockspec-activations" not in loaded  # the policy took effect
    assert run(capsys, "--registry", policy, "list", "--json") == (code, out, err)


def test_export_hf_names_the_force_flag_only(capsys, assets):
    line = one_error(*run(capsys, "export-hf", assets.char_ckpt, "--out", assets.hf)[::2])
    assert line == f"{assets.hf}: already exists; pass --force to replace it"


def test_trace_of_a_pickled_hugging_face_folder_suggests_import_hf(capsys, assets, tmp_path):
    from safetensors.torch import load_file

    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_bytes((assets.hf / "config.json").read_bytes())
    torch.save(load_file(assets.hf / "model.safetensors"), folder / "pytorch_model.bin")
    line = one_error(*run(capsys, "trace", folder, "--ids", "1,2")[::2])
    assert "blockspec import-hf DIR --allow-pickle --out CKPT" in line and "allow_pickle=True" not in line


def test_trace_weights_takes_a_checkpoint_of_the_same_model(capsys, assets):
    code, out, err = run(capsys, "trace", TINY, "--ids", "1,2", "--weights", assets.char_ckpt, "--json")
    assert code == 0, err
    code, direct, err = run(capsys, "trace", assets.char_ckpt, "--ids", "1,2", "--json")
    assert code == 0, err
    assert json.loads(out)["next_token"] == json.loads(direct)["next_token"]
    line = one_error(*run(capsys, "trace", TINY, "--ids", "1,2", "--weights", assets.ckpt)[::2])
    assert line.startswith(f"--weights: {assets.ckpt} is a checkpoint of 'micro'") and "blockspec trace" in line


def test_trace_weights_refuses_a_hugging_face_file_in_one_line(capsys, assets):
    line = one_error(*run(capsys, "trace", TINY, "--ids", "1,2", "--weights", assets.hf / "model.safetensors")[::2])
    assert "Hugging Face weights file" in line and "import-hf" in line


def test_exported_character_model_has_token_ids_inside_its_vocabulary(assets, capfd):
    transformers = pytest.importorskip("transformers")
    config = json.loads((assets.hf / "config.json").read_text())
    assert config["vocab_size"] == 65
    assert config["bos_token_id"] is None and config["eos_token_id"] is None  # explicit: no special tokens
    capfd.readouterr()
    model = transformers.AutoModelForCausalLM.from_pretrained(assets.hf)
    assert model.config.bos_token_id is None and model.config.eos_token_id is None
    assert "token_id" not in capfd.readouterr().err  # no "must be None or an integer within the vocabulary"


def test_export_keeps_an_imported_models_token_ids_inside_the_vocabulary():
    from blockspec.interop.hf_config import _token_ids

    assert _token_ids({"bos_token_id": 1, "eos_token_id": [2, 9, 500]}, 100) == {
        "bos_token_id": 1, "eos_token_id": [2, 9], "pad_token_id": None}
    assert _token_ids({"bos_token_id": 50256, "eos_token_id": True}, 65) == {
        "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
