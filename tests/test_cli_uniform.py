"""The command line is even: every reporting command has --json (printed one way), every command
that runs a model has --device (resolved one way), --plot is a FILE everywhere, bad values are
one `blockspec: error:` line with exit 2, and library errors reach the user as flags."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

import blockspec
from blockspec.cli import common, main, make_parser
from blockspec.errors import CheckpointError
from blockspec.train.loop import TrainConfigError, make_config
from blockspec.interop import export_hf

from .corpus import small_play
from .specs import spec_text
from .weights_helpers import llama_spec, randomized
from .cli_run import run

SPECS = Path(__file__).resolve().parents[1] / "examples" / "specs"
TINY = str(SPECS / "tiny-shakespeare.toml")
MICRO = spec_text(name="micro", vocab_size=64, context_length=32, d_model=32, n_layers=2, n_heads=4, d_ff=64,
                  positional="rope")
FAST = ["--batch-size", "8", "--eval-batches", "2", "--eval-every", "0", "--device", "cpu"]


def subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in make_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def options(command: str) -> set[str]:
    """The command's flags; a command with actions (`tokenizer train`): the flags every action has."""
    parser = subparsers()[command]
    nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if nested:
        return set.intersection(*({f for a in p._actions for f in a.option_strings} for p in nested[0].choices.values()))
    return {flag for action in parser._actions for flag in action.option_strings}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A spec, a text and a checkpoint trained for one step: enough for train, generate and the rest."""
    folder = tmp_path_factory.mktemp("trained")
    (folder / "micro.toml").write_text(MICRO)
    (folder / "play.txt").write_text(small_play())
    assert main(["train", str(folder / "micro.toml"), "--data", str(folder / "play.txt"), "--steps", "1",
                 "--out", str(folder / "ckpt"), "--quiet", *FAST]) == 0
    return folder


# -- --json --------------------------------------------------------------------------------------------------


def test_every_command_reports_json():
    assert all("--json" in options(command) for command in subparsers()), "a command without --json"


def json_cases(folder: Path, tmp: Path, registry) -> dict[str, list]:
    hf = export_hf(randomized(blockspec.build(llama_spec(registry, kv=2, tied=True), registry=registry), seed=6),
                   tmp / "hf")
    adapted = {**blockspec.spec_to_dict(llama_spec(registry)), "adapters": [{"use": "lora", "targets": ["@attention"]}]}
    blockspec.save(blockspec.build(blockspec.structure_spec(adapted, registry), registry=registry, seed=0),
                   tmp / "adapted")
    return {
        "list": ["list", "--kind", "norm"],
        "check": ["check", TINY, str(folder / "micro.toml")],
        "show": ["show", TINY],
        "trace": ["trace", TINY, "--ids", "1,2", "--device", "cpu"],
        "explore": ["explore", TINY, "--ids", "1,2", "--out", tmp / "page.html", "--device", "cpu"],
        "verify": ["verify", "--component", "activation:gelu", "--max-examples", "2", "--device", "cpu"],
        "import-hf": ["import-hf", hf, "--out", tmp / "imported"],
        "export-hf": ["export-hf", tmp / "imported", "--out", tmp / "exported"],  # after import-hf
        "doctor": ["doctor"],
        "train": ["train", folder / "micro.toml", "--data", folder / "play.txt", "--steps", "1", *FAST],
        "sweep": ["sweep", folder / "micro.toml", "--data", folder / "play.txt", "--vary", "norm.use=rmsnorm",
                  "--steps", "1", "--out", tmp / "sweep", *FAST],
        "generate": ["generate", folder / "ckpt", "--prompt", "to", "--max-new-tokens", "0", "--device", "cpu"],
        "eval": ["eval", folder / "ckpt", "--data", folder / "play.txt", "--device", "cpu"],
        "export": ["export", folder / "ckpt", "--weights-only", "--out", tmp / "shared"],
        "tokenizer": ["tokenizer", "train", folder / "play.txt", "--vocab-size", "260", "--out", tmp / "tok"],
        "data": ["data", "prepare", folder / "play.txt", "--tokenizer", "char", "--out", tmp / "data"],
        "schema": ["schema", "--out", tmp / "spec.schema.json"],
        "merge": ["merge", tmp / "adapted", "--out", tmp / "merged"],
        "export-peft": ["export-peft", tmp / "adapted", "--out", tmp / "peft"],
    }


def test_every_command_prints_one_indented_json_document(capsys, tmp_path, trained, registry):
    pytest.importorskip("hypothesis")
    cases = json_cases(trained, tmp_path, registry)
    assert set(cases) == set(subparsers())  # a new command needs a case here
    for command, argv in cases.items():
        code, out, err = run(capsys, *argv, "--json")
        assert code == 0, (command, err)
        data = json.loads(out)
        assert out == json.dumps(data, indent=2, ensure_ascii=False) + "\n", command  # the one shared format


def test_check_json_has_one_object_per_spec_with_located_problems(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(Path(TINY).read_text().replace("n_heads = 4", "n_heads = 5"))
    code, out, err = run(capsys, "check", TINY, bad, "--json")
    assert code == 2 and "blockspec: error: " in err  # problems stay error lines on stderr too
    good, broken = json.loads(out)
    assert good["file"] == TINY and good["ok"] is True and good["parameters"] > 0 and good["problems"] == []
    assert broken["ok"] is False and broken["parameters"] is None and broken["problems"]
    problem = broken["problems"][0]
    assert {"file", "line", "path", "message", "hint"} <= problem.keys()
    assert problem["file"] == str(bad) and problem["line"] is not None and problem["path"].startswith("$.model")


def test_json_keeps_non_ascii_text_readable(capsys, tmp_path, trained):
    code, out, _ = run(capsys, "generate", trained / "ckpt", "--prompt", "to", "--max-new-tokens", "0",
                       "--device", "cpu", "--json")
    found = json.loads(out)
    assert code == 0 and found == {"model": found["model"], "prompt": "to", "text": "to", "new_tokens": 0,
                                   "ids": found["ids"], "tokenizer": found["tokenizer"], "stop_reason": "length"}
    assert found["tokenizer"].startswith("characters")
    common.emit_json({"text": "né"})
    assert '"né"' in capsys.readouterr().out


# -- --device ------------------------------------------------------------------------------------------------

DEVICE_COMMANDS = {
    "trace": ["trace", TINY, "--ids", "1"],
    "explore": ["explore", TINY, "--ids", "1", "--out", "page.html"],
    "verify": ["verify"],
    "train": ["train", "{spec}", "--data", "{data}"],
    "sweep": ["sweep", "{spec}", "--data", "{data}", "--out", "sweep-out"],
    "generate": ["generate", "{ckpt}", "--prompt", "to"],
    "eval": ["eval", "{ckpt}", "--data", "{data}"],
}


def test_the_commands_that_run_a_model_take_device_and_the_others_do_not():
    with_device = {command for command in subparsers() if "--device" in options(command)}
    assert with_device == set(DEVICE_COMMANDS)


@pytest.mark.parametrize("command", sorted(DEVICE_COMMANDS))
@pytest.mark.parametrize(("device", "message"), [
    ("tpu", "--device: expected one of auto, cpu, cuda, cuda:N, mps, found 'tpu'"),
    ("cpu:1", "--device: expected one of auto, cpu, cuda, cuda:N, mps, found 'cpu:1'"),
])
def test_a_bad_device_is_one_error_line(capsys, tmp_path, trained, command, device, message):
    fill = {"spec": trained / "micro.toml", "data": trained / "play.txt", "ckpt": trained / "ckpt"}
    argv = [str(a).format(**fill) for a in DEVICE_COMMANDS[command]]
    code, out, err = run(capsys, *argv, "--device", device)
    assert code == 2 and out == ""
    assert err == f"blockspec: error: {message}\n"


def test_cuda_without_cuda_says_so(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, _, err = run(capsys, "trace", TINY, "--ids", "1", "--device", "cuda")
    assert code == 2 and err == ("blockspec: error: --device: 'cuda' asked for, but torch sees no CUDA device; "
                                 "use --device cpu (or auto)\n")


def test_auto_prefers_cuda_then_mps_then_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(common, "_mps_available", lambda: False)
    assert common.resolve_device("auto") == torch.device("cpu")
    assert common.resolve_device(" CPU ") == torch.device("cpu")
    monkeypatch.setattr(common, "_mps_available", lambda: True)
    assert common.resolve_device("auto") == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert common.resolve_device("auto") == torch.device("cuda")


# -- --plot --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["trace", "train"])
def test_plot_is_a_file_whose_suffix_is_checked_first(capsys, tmp_path, trained, command):
    argv = {"trace": ["trace", TINY, "--ids", "1"],
            "train": ["train", trained / "micro.toml", "--data", trained / "play.txt", *FAST]}[command]
    code, out, err = run(capsys, *argv, "--plot", "x.jpgg")
    assert code == 2 and out == ""
    assert err == "blockspec: error: --plot: expected a file ending in .png, .svg, .pdf, found 'x.jpgg'\n"
    code, _, err = run(capsys, *argv, "--plot", tmp_path)
    assert code == 2 and err.startswith("blockspec: error: --plot: ") and "give a file name" in err


def test_train_plot_suffix_picks_the_format(capsys, tmp_path, trained):
    pytest.importorskip("matplotlib")
    code, out, err = run(capsys, "train", trained / "micro.toml", "--data", trained / "play.txt", "--steps", "2",
                         *FAST, "--plot", tmp_path / "loss.pdf", "--json")
    assert code == 0, err
    assert json.loads(out)["plot"] == str(tmp_path / "loss.pdf")
    assert (tmp_path / "loss.pdf").read_bytes()[:5] == b"%PDF-"


# -- shared argument types -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "message"), [
    (["train", "s.toml", "--data", "d.txt", "--steps", "-1"], "--steps: expected an integer >= 0, found '-1'"),
    (["train", "s.toml", "--data", "d.txt", "--lr", "0"], "--lr: expected a number > 0, found '0'"),
    (["train", "s.toml", "--data", "d.txt", "--lr", "nan"], "--lr: expected a number > 0, found 'nan'"),
    (["train", "s.toml", "--data", "d.txt", "--weight-decay", "-0.1"],
     "--weight-decay: expected a number >= 0, found '-0.1'"),
    (["train", "s.toml", "--data", "d.txt", "--threads", "0"],
     "--threads: expected an integer from 1 to 1024, found '0'"),
    (["generate", "c", "--prompt", "a", "--top-k", "0"], "--top-k: expected a positive integer, found '0'"),
    (["generate", "c", "--prompt", "a", "--temperature", "-1"], "--temperature: expected a number >= 0, found '-1'"),
    (["generate", "c", "--prompt", "a", "--seed", "x"],
     "--seed: expected an integer from -9223372036854775808 to 18446744073709551615, found 'x'"),
    (["trace", TINY, "--ids", "1", "--top", "1.5"], "--top: expected an integer >= 0, found '1.5'"),
    (["verify", "--max-examples", "0"], "--max-examples: expected a positive integer, found '0'"),
])
def test_bad_numbers_are_one_error_line_naming_the_flag(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith(f"blockspec: error: {message}") and len(err.splitlines()) == 1


# -- library errors name parameters; the command line names flags -------------------------------------------


def test_library_errors_name_parameters_not_flags(tmp_path, registry):
    with pytest.raises(TrainConfigError, match=r"^training settings: \$\.lr: expected a number > 0.0") as caught:
        make_config({"lr": 0.0})
    assert "--" not in str(caught.value)
    model = blockspec.build(llama_spec(registry, kv=2, tied=True), registry=registry)
    export_hf(model, tmp_path / "out")  # an export there: replacing it is what overwrite asks
    with pytest.raises(CheckpointError, match="pass overwrite=True to replace it") as caught:
        export_hf(model, tmp_path / "out")
    assert "--" not in str(caught.value)


def test_the_command_line_translates_parameters_to_its_flags(capsys, trained, monkeypatch):
    # settings out of range (as a resumed checkpoint's may be): the library names the setting, train its flag
    from blockspec.train import loop, run as training

    real = loop.make_config
    monkeypatch.setattr(training, "make_config", lambda settings: real({**settings, "eval_batches": 0}))
    code, _, err = run(capsys, "train", trained / "micro.toml", "--data", trained / "play.txt", *FAST)
    assert code == 2 and err == "blockspec: error: training settings: --eval-batches: expected a positive integer, found 0\n"
