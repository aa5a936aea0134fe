"""``--force`` replaces only what blockspec wrote: an output of the same kind, never a user's folder or file.

Each command meets a folder (or, for a file output, a file) that is not its own kind, with and
without ``--force``: one line, exit 2, the folder byte for byte, nothing else beside it. Then each
replaces an output of its own kind, and the result is a valid output of that kind.
"""

from __future__ import annotations

import json
import shutil

import pytest

from blockspec.checkpoint.layout import CHECKPOINT
from blockspec.data.prepared import PREPARED, PreparedDataset
from blockspec.data.tokenizer import TOKENIZER_DIRECTORY, read_tokenizer_directory
from blockspec.inspect.explore.page import EXPLORER_PAGE, write_page
from blockspec.interop.hf_layout import EXPORT
from blockspec.train.plot import PLOT_IMAGE
from blockspec.train.sweep import SWEEP

from .outputs_world import PNG_SIGNATURE, World, command_line, shared_world, one_error_line, run, tree

pytest.importorskip("tokenizers")
pytest.importorskip("matplotlib")

DIRECTORY_COMMANDS = ("train", "sweep", "import-hf", "export-hf", "export", "tokenizer train", "data prepare")
FILE_COMMANDS = {"explore": "out.html", "trace --plot": "out.png", "train --plot": "out.png"}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return shared_world(tmp_path_factory)


def foreign_folder(root):
    folder = root / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("a user's notes, not blockspec's")
    (folder / "sub").mkdir()
    (folder / "sub" / "draft.md").write_text("draft")
    return folder


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
@pytest.mark.parametrize("command", DIRECTORY_COMMANDS)
def test_a_folder_that_is_not_the_commands_output_is_never_replaced(world, tmp_path, capsys, command, force):
    folder = foreign_folder(tmp_path)
    before = tree(folder)
    code, err = run(capsys, command_line(world, command, folder, force=force))
    line = one_error_line(err)
    assert code == 2 and f"{folder}: exists and is not " in line and "refusing to replace it" in line, err
    assert tree(folder) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


@pytest.mark.parametrize("command", list(FILE_COMMANDS))
def test_a_file_that_is_not_the_commands_output_is_never_replaced(world, tmp_path, capsys, command):
    target = tmp_path / FILE_COMMANDS[command]
    target.write_bytes(b"a user's file that happens to have this name\n")
    code, err = run(capsys, command_line(world, command, target, force=True))
    line = one_error_line(err)
    assert code == 2 and "exists and is not a" in line and "its content is not one" in line, err
    assert target.read_bytes() == b"a user's file that happens to have this name\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


def test_tokenizer_train_never_replaces_a_model_directory_that_holds_a_tokenizer(world, tmp_path, capsys):
    """A Hugging Face model has a tokenizer.json too: it is not a tokenizer directory, and keeps its files."""
    model = tmp_path / "model"
    shutil.copytree(world.assets.hf, model)
    shutil.copy(world.tokenizer / "tokenizer.json", model / "tokenizer.json")
    before = tree(model)
    code, err = run(capsys, command_line(world, "tokenizer train", model, force=True))
    assert code == 2 and "is not a tokenizer directory" in one_error_line(err) and "config.json" in err, err
    assert tree(model) == before


def test_export_hf_never_replaces_a_downloaded_model_with_files_export_does_not_write(world, tmp_path, capsys):
    downloaded = tmp_path / "downloaded"
    shutil.copytree(world.assets.hf, downloaded)
    (downloaded / "README.md").write_text("model card")
    before = tree(downloaded)
    code, err = run(capsys, command_line(world, "export-hf", downloaded, force=True))
    assert code == 2 and "is not a Hugging Face export" in one_error_line(err) and "README.md" in err, err
    assert tree(downloaded) == before


def test_data_prepare_never_replaces_another_kind_of_output(world, tmp_path, capsys):
    for kind, source in (("checkpoint", world.assets.ckpt), ("tokenizer", world.tokenizer)):
        target = tmp_path / kind
        shutil.copytree(source, target)
        before = tree(target)
        code, err = run(capsys, command_line(world, "data prepare", target, force=True))
        assert code == 2 and "is not a prepared dataset" in one_error_line(err), err
        assert tree(target) == before


@pytest.mark.parametrize("command", ["tokenizer train", "data prepare", "export-hf", "explore", "trace --plot",
                                     "train --plot"])
def test_an_output_of_the_same_kind_is_replaced_by_a_valid_one(world, tmp_path, capsys, command):
    target = tmp_path / world.outputs[command].name
    old = world.outputs[command]
    shutil.copytree(old, target) if old.is_dir() else shutil.copy(old, target)
    if command == "tokenizer train":
        (target / "tokenizer.json").write_text(json.dumps({"type": "char", "chars": "ab"}))  # another tokenizer
    code, err = run(capsys, command_line(world, command, target, force=True))
    assert code == 0, err
    kind = {"tokenizer train": TOKENIZER_DIRECTORY, "data prepare": PREPARED, "export-hf": EXPORT,
            "explore": EXPLORER_PAGE, "trace --plot": PLOT_IMAGE, "train --plot": PLOT_IMAGE}[command]
    assert kind.mismatch(target) is None
    if command == "tokenizer train":
        assert read_tokenizer_directory(target).vocab_size == 300
    if command == "data prepare":
        assert PreparedDataset(target).tokenizer.vocab_size == 300
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_each_kind_recognises_what_its_writer_writes(world, tmp_path):
    """The markers are read from the real outputs, so a writer that changes its files cannot orphan them."""
    assert CHECKPOINT.mismatch(world.outputs["train"]) is None
    assert CHECKPOINT.mismatch(world.outputs["export"]) is None
    assert EXPORT.mismatch(world.outputs["export-hf"]) is None
    assert PREPARED.mismatch(world.outputs["data prepare"]) is None
    assert TOKENIZER_DIRECTORY.mismatch(world.outputs["tokenizer train"]) is None
    assert PLOT_IMAGE.mismatch(world.outputs["trace --plot"]) is None
    assert PLOT_IMAGE.mismatch(world.outputs["train --plot"]) is None
    assert EXPLORER_PAGE.mismatch(write_page({"stages": []}, tmp_path / "p.html")) is None
    for suffix, head in ((".svg", b"<?xml"), (".pdf", b"%PDF-"), (".png", PNG_SIGNATURE)):
        (tmp_path / f"x{suffix}").write_bytes(head + b"...")
        assert PLOT_IMAGE.mismatch(tmp_path / f"x{suffix}") is None
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "sweep.json").write_text("{}")
    assert SWEEP.mismatch(tmp_path / "s") is None
    assert "has no manifest.json" in CHECKPOINT.mismatch(world.outputs["export-hf"])
