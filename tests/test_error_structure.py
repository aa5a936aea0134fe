"""Errors keep their problems as data to the command line, which says them with its flags from a
table (path or parameter -> flag), never by rewriting the library's text."""

from __future__ import annotations

import pickle

import pytest
import torch

import blockspec
from blockspec.cli import (export_cmd, export_weights_cmd, generate_cmd, import_cmd, main, model_input, sweep_cmd,
                           train_cmd)
from blockspec.cli.common import flag_names
from blockspec.outputs import OutputExistsError
from blockspec.errors import BlockspecError, CheckpointError, Problem
from blockspec.interop.hf_dir import open_weights
from blockspec.generation.tokens import generate
from blockspec.train.loop import make_config
from blockspec.train.sweep import run_sweep
from blockspec.data.tokenizer import parse_ids, stand_in_tokenizer

from .specs import spec_text

MICRO = spec_text(name="micro", vocab_size=64, context_length=8, d_model=16, n_layers=1, n_heads=2, d_ff=32)


def said(flags: dict[str, str], call) -> str:
    """The line a command prints for the library error ``call`` raises inside its ``flag_names``."""
    with pytest.raises(BlockspecError) as caught, flag_names(flags):
        call()
    return str(caught.value)


# -- the error carries its problems ----------------------------------------------------------------------


def test_a_problem_keeps_expected_found_and_says_them_as_before():
    problem = Problem(file="f.toml", path="$.model.d_model", line=3, expected="an integer", found="str '64'")
    assert str(problem) == "f.toml:3: $.model.d_model: expected an integer, found str '64'"
    assert (problem.expected, problem.found) == ("an integer", "str '64'")


def test_every_blockspec_error_carries_problems_and_its_text_is_unchanged():
    plain = CheckpointError("x: broken")
    assert str(plain) == "x: broken" and [p.message for p in plain.problems] == ["x: broken"]
    located = CheckpointError([Problem(file="m.json", path="$.format", expected="1", found="2")])
    assert str(located) == "m.json: $.format: expected 1, found 2"
    again = pickle.loads(pickle.dumps(located))  # a worker's error reaches the parent whole
    assert again.problems == located.problems and str(again) == str(located)


def test_a_problem_names_a_parameter_as_a_slot_a_frontend_fills():
    error = OutputExistsError("out")
    assert str(error) == "out: already exists; pass overwrite=True to replace it"
    assert error.render({"overwrite": "--force"}) == "out: already exists; pass --force to replace it"
    assert error.problems[0].names == {"overwrite": "overwrite=True"}


def test_flag_names_renders_from_data_and_never_rewrites_text():
    text = "pass overwrite=True; lr: 0 is bad; $.lr too"  # the words, but no path or slot: left alone
    assert said({"overwrite": "--force", "lr": "--lr", "$.lr": "--lr"}, lambda: _raise(BlockspecError(text))) == text


def test_a_spec_error_deep_in_a_checkpoint_load_keeps_its_path(tmp_path, registry):
    model = blockspec.build(blockspec.loads_spec(MICRO, registry=registry), registry=registry)
    blockspec.save(model, tmp_path / "ckpt")
    with pytest.raises(CheckpointError) as caught:
        blockspec.load(tmp_path / "ckpt", registry=blockspec.Registry())
    paths = [p.path for p in caught.value.problems]
    assert '$.lock["positional:learned"]' in paths and all(p.file for p in caught.value.problems), caught.value


def test_a_library_error_reaches_the_command_line_with_its_path(tmp_path, registry, monkeypatch):
    import blockspec.cli as cli

    model = blockspec.build(blockspec.loads_spec(MICRO, registry=registry), registry=registry)
    blockspec.save(model, tmp_path / "ckpt")
    seen: list[BlockspecError] = []
    monkeypatch.setattr(cli, "print_error", seen.append)
    monkeypatch.setenv("BLOCKSPEC_PLUGINS", "")  # none selected: the checkpoint's locked components are missing
    assert main(["generate", str(tmp_path / "ckpt"), "--ids", "1", "--device", "cpu"]) == 2
    (error,) = seen
    assert isinstance(error, CheckpointError)
    assert '$.lock["positional:learned"]' in [p.path for p in error.problems]
    assert {p.file for p in error.problems} == {str(tmp_path / "ckpt" / "spec.toml")}


# -- each command's table --------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [export_cmd, export_weights_cmd, import_cmd, train_cmd, sweep_cmd])
def test_commands_that_replace_outputs_say_force(command):
    assert said(command.FLAGS, lambda: _raise(OutputExistsError("o"))) == "o: already exists; pass --force to replace it"


def test_import_hf_says_allow_pickle(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    line = said(import_cmd.FLAGS, lambda: open_weights(tmp_path).__enter__())
    assert "or opt in with --allow-pickle to read it with torch.load(weights_only=True)" in line
    assert "allow_pickle" not in line


def test_trace_says_its_flags():
    assert said(model_input.FLAGS, lambda: parse_ids("1,x", 64)) == "--ids: expected an integer token id, found 'x'"
    assert said(model_input.FLAGS, lambda: parse_ids("1,65", 64)) == "--ids: token id 65 is outside the vocabulary 0..63"
    assert said(model_input.FLAGS, lambda: stand_in_tokenizer(7)).endswith("; give token ids with --ids instead of --text")


def test_trace_sends_pickles_through_import_hf(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    line = said(model_input.PICKLE, lambda: open_weights(tmp_path).__enter__())
    assert "import it with `blockspec import-hf DIR --allow-pickle --out CKPT`" in line and "allow_pickle=" not in line


def test_train_says_its_flags():
    line = said(train_cmd.FLAGS, lambda: make_config({"batch_size": 8, "grad_accum": 3}))
    assert line == "training settings: --grad-accum: expected a divisor of --batch-size (8), found 3"
    assert said(train_cmd.FLAGS, lambda: make_config({"lr": 0.0})).startswith("training settings: --lr: expected")


def test_sweep_says_its_flags(registry, tmp_path):
    call = lambda: run_sweep(tmp_path / "s.toml", tmp_path / "d.txt", {}, tmp_path / "o", seeds=[1, 1],  # noqa: E731
                             registry=registry)
    assert said(sweep_cmd.FLAGS, call) == "--seeds: expected distinct seeds, found [1, 1]"
    assert said(sweep_cmd.FLAGS, lambda: make_config({"eval_batches": 0})) == (
        "training settings: --eval-batches: expected a positive integer, found 0")


def test_generate_says_its_flags(registry):
    model = blockspec.build(blockspec.loads_spec(MICRO, registry=registry), registry=registry)
    call = lambda: generate(model, torch.zeros(1, 4, dtype=torch.long), max_new_tokens=20,  # noqa: E731
                            overflow="error")
    line = said(generate_cmd.FLAGS, call)
    assert "(--overflow slide)" in line and "overflow=" not in line


def test_tokenizer_train_says_vocab_size(tmp_path, capsys):
    (tmp_path / "t.txt").write_text("some text to learn from")
    assert main(["tokenizer", "train", str(tmp_path / "t.txt"), "--vocab-size", "100",
                 "--out", str(tmp_path / "tok")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("blockspec: error: --vocab-size: a byte-level BPE needs at least 257 tokens") and (
        err.rstrip().endswith("use --vocab-size 257 or more")), err


def _raise(error: BaseException):
    raise error


def test_the_tables_name_only_flags_the_command_has():
    from blockspec.cli import make_parser

    parser = make_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    for name, module in [("export-hf", export_cmd), ("export", export_weights_cmd), ("import-hf", import_cmd),
                         ("train", train_cmd), ("sweep", sweep_cmd), ("trace", model_input),
                         ("explore", model_input)]:
        flags = {o for a in action.choices[name]._actions for o in a.option_strings}
        for key, flag in module.FLAGS.items():
            if key.startswith("$.") or flag.startswith("--"):
                assert flag.split()[0] in flags, (name, key, flag)



# -- matplotlib is loaded one way, and its absence is one error class ------------------------------------


def test_every_plot_says_the_same_thing_without_matplotlib(tmp_path, registry, monkeypatch):
    import sys

    from blockspec.inspect.plots import write_plots
    from blockspec.train.loop import History
    from blockspec.train.plot import MissingDependencyError, PlotError, plot_losses
    from blockspec.train.sweep import plot_curves

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    calls = [lambda: plot_losses({"a": History()}, tmp_path / "l.png"),
             lambda: write_plots(None, None, tmp_path / "t", []),  # type: ignore[arg-type]
             lambda: plot_curves([], tmp_path / "c.png")]
    for call in calls:
        with pytest.raises(MissingDependencyError, match=r"^plots need matplotlib, which is not installed") as caught:
            call()
        assert isinstance(caught.value, PlotError) and isinstance(caught.value, ImportError)
