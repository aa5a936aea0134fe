"""Issue 28, finding 1: every output is checked before work, and an existing one needs ``--force``.

``explore --out`` and ``trace --plot`` replaced an existing page or picture without asking, while
``train --plot`` refused one. Now every command that writes a file or a folder refuses an existing
output of its kind unless ``--force``, in one line, before it opens a model; and every such
command takes ``--force``, with the same meaning (replace an output of this command's kind, never
anything else).
"""

from __future__ import annotations

import argparse
import shutil

import pytest

from blockspec.cli import make_parser
from blockspec.train.plot import PLOT_IMAGE

from .cli_walk import commands
from .faults.outputs_world import World, command_line, one_error_line, run, shared_world, tree

pytest.importorskip("tokenizers")
pytest.importorskip("matplotlib")

WRITERS = ("train", "train --plot", "import-hf", "export-hf", "export", "tokenizer train", "data prepare",
           "explore", "trace --plot")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return shared_world(tmp_path_factory)


def copy_output(world: World, command: str, folder):
    """An output of ``command``'s own kind, at a new place in ``folder``."""
    old = world.outputs[command]
    target = folder / old.name
    shutil.copytree(old, target) if old.is_dir() else shutil.copy(old, target)
    return target


class NoWork(AssertionError):
    """Raised by a stand-in for the command's first piece of work."""


@pytest.fixture
def no_model(monkeypatch):
    """Opening the model is work: a refusal must come before it."""
    import blockspec.cli.explore_cmd as explore
    import blockspec.cli.trace_cmd as trace

    def refuse(args):
        raise NoWork("the model was opened before the output was checked")

    for module in (explore, trace):
        monkeypatch.setattr(module, "subject_of", refuse)


@pytest.mark.parametrize("command", WRITERS)
def test_an_existing_output_of_the_commands_kind_is_refused_without_force(world, tmp_path, capsys, command):
    target = copy_output(world, command, tmp_path)
    before = tree(target)
    code, err = run(capsys, command_line(world, command, target))
    line = one_error_line(err)
    assert code == 2 and f"{target}: already exists; pass --force to replace it" in line, err
    assert tree(target) == before


@pytest.mark.parametrize("command", ["explore", "trace --plot"])
def test_explore_and_trace_refuse_before_they_open_the_model(world, tmp_path, capsys, no_model, command):
    target = copy_output(world, command, tmp_path)
    code, err = run(capsys, command_line(world, command, target))
    assert code == 2 and "already exists; pass --force" in one_error_line(err), err


def test_a_picture_trace_would_write_beside_the_plot_is_refused_before_work(world, tmp_path, capsys, no_model):
    """``trace --plot t.png`` also writes t-blocks.0.attention.png and t-positional.png: they count too."""
    sibling = tmp_path / "t-blocks.0.attention.png"
    shutil.copy(world.outputs["trace --plot"], sibling)
    before = sibling.read_bytes()
    code, err = run(capsys, command_line(world, "trace --plot", tmp_path / "t.png"))
    assert code == 2 and f"{sibling}: already exists; pass --force to replace it" in one_error_line(err), err
    assert sibling.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [sibling.name]


def test_trace_with_force_replaces_the_plot_and_its_siblings(world, tmp_path, capsys):
    target = tmp_path / "t.png"
    assert run(capsys, command_line(world, "trace --plot", target))[0] == 0
    pictures = sorted(tmp_path.iterdir())
    assert len(pictures) > 1 and all(PLOT_IMAGE.mismatch(p) is None for p in pictures)
    assert run(capsys, command_line(world, "trace --plot", target))[0] == 2
    code, err = run(capsys, command_line(world, "trace --plot", target, force=True))
    assert code == 0, err
    assert sorted(tmp_path.iterdir()) == pictures


def test_explore_with_force_replaces_its_page(world, tmp_path, capsys):
    target = copy_output(world, "explore", tmp_path)
    target.write_bytes(target.read_bytes().replace(b"</html>", b"<!-- older --></html>"))
    code, err = run(capsys, command_line(world, "explore", target, force=True))
    assert code == 0, err
    assert b"<!-- older -->" not in target.read_bytes()


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def test_every_command_that_writes_takes_force_with_one_meaning():
    """An --out or a --plot comes with --force, and --force's help says it replaces only what the command wrote."""
    writers = {" ".join(words): sub for words, sub in commands(make_parser()) if _options(sub) & {"--out", "--plot"}}
    assert {"explore", "trace", "train", "sweep", "export-hf", "export", "import-hf", "tokenizer train",
            "data prepare"} <= set(writers)
    for name, sub in writers.items():
        force = next((a for a in sub._actions if "--force" in a.option_strings), None)
        assert force is not None, f"{name} writes an output but takes no --force"
        assert force.help.startswith("replace "), (name, force.help)
