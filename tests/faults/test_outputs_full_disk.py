"""A full disk under every command that writes: one line naming the output and the space, exit 2,
the previous output byte for byte, no staging or partial file left behind.

The disk is a small tmpfs filled up to 2 KiB where the machine lets us mount one (a real ENOSPC),
else a file-size limit of 2 KiB (RLIMIT_FSIZE, SIGXFSZ ignored: a real EFBIG from the kernel).
"""

from __future__ import annotations

import pytest

from .outputs_world import (NO_SPACE_WORDS, World, command_line, copy_output, full_disk, shared_world, one_error_line,
                            run, tree)

pytest.importorskip("tokenizers")
pytest.importorskip("matplotlib")

REPLACED = ("train", "import-hf", "export-hf", "export", "tokenizer train", "data prepare", "explore", "trace --plot",
            "train --plot")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return shared_world(tmp_path_factory)


@pytest.fixture
def disk(tmp_path):
    with full_disk(tmp_path) as place:
        yield place


def listing(disk) -> list[str]:
    return sorted(p.name for p in disk.directory.iterdir() if p.name not in disk.spare)


@pytest.mark.parametrize("command", REPLACED)
def test_the_old_output_survives_a_full_disk(world, disk, capsys, command):
    target = disk.directory / world.outputs[command].name
    copy_output(world.outputs[command], target)
    before = tree(target)
    with disk.exhaust():
        code, err = run(capsys, command_line(world, command, target, force=True))
    line = one_error_line(err)
    assert code == 2, err
    assert f"{target}: cannot be written: " in line, line
    assert any(words in line for words in NO_SPACE_WORDS), line
    assert "free there" in line or "per file allowed" in line, line  # the space, where the file system says it
    assert tree(target) == before  # byte for byte: 4,096 bytes of a new tokenizer.json are not the old one
    assert listing(disk) == [target.name]  # no staging folder, no partial file beside it


@pytest.mark.parametrize("command", ["train", "sweep", "tokenizer train", "data prepare", "export-hf", "explore"])
def test_a_new_output_on_a_full_disk_leaves_nothing_that_looks_valid(world, disk, capsys, command):
    target = disk.directory / "new"
    with disk.exhaust():
        code, err = run(capsys, command_line(world, command, target))
    line = one_error_line(err)
    assert code == 2 and any(words in line for words in NO_SPACE_WORDS), err
    if command == "sweep":  # a sweep folder is its own record: the plan, and no run that looks finished
        assert not [p for p in (target / "runs").iterdir()] if (target / "runs").exists() else True
        assert not (target / "results.csv").exists()
    else:
        assert listing(disk) == [], listing(disk)
