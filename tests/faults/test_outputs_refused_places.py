"""A read-only place, and staging left by a killed writer.

Every command that writes, pointed at a read-only file system, is refused before any work in one
line naming the path (root ignores permission bits, so the place is a tmpfs remounted read-only;
the tests skip where the machine refuses the mount). A place that turns read-only after the check
still gives one line, from the writer. Staging entries of a writer that no longer runs are removed
by the next writer of the same target; a live writer's are left alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from blockspec.checkpoint.atomic import atomic_directory
from blockspec.errors import OutputError
from blockspec.outputs import atomic_file, write_atomically

from .outputs_world import World, command_line, shared_world, needs_mount, one_error_line, remount_read_only, run, tmpfs

pytest.importorskip("tokenizers")
pytest.importorskip("matplotlib")

WRITERS = ("train", "train --plot", "sweep", "import-hf", "export-hf", "export", "tokenizer train", "data prepare",
           "explore", "trace --plot")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return shared_world(tmp_path_factory)


@pytest.fixture
def read_only(tmp_path):
    needs_mount()
    with tmpfs(tmp_path / "ro", size="1m") as place:
        remount_read_only(place)
        yield place


@pytest.mark.parametrize("command", WRITERS)
def test_a_read_only_place_is_refused_before_any_work(world, read_only, capsys, command):
    suffix = {"explore": ".html", "trace --plot": ".png", "train --plot": ".png"}.get(command, "")
    target = read_only / f"new{suffix}"
    code, err = run(capsys, command_line(world, command, target, force=True))
    line = one_error_line(err)
    assert code == 2 and f"{target}: cannot be created: {read_only} is not writable" in line, err
    assert not any(read_only.iterdir())


def test_a_read_only_place_met_by_the_writer_itself_is_one_line_about_the_output(read_only):
    for write in (lambda: write_atomically(read_only / "page.html", "x"), lambda: _directory(read_only / "ckpt")):
        with pytest.raises(OutputError) as caught:
            write()
        assert str(caught.value).startswith(f"{read_only}/") and "cannot be written: Read-only file system" \
            in str(caught.value), caught.value
        assert "\n" not in str(caught.value)


def _directory(target: Path) -> None:
    with atomic_directory(target) as staging:
        (staging / "file").write_text("x")


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_staging_of_a_killed_writer_is_removed_by_the_next_one(tmp_path):
    pid = dead_pid()
    stale_folder = tmp_path / f".ckpt.tmp-{pid}-abc123"
    stale_folder.mkdir()
    (stale_folder / "model.safetensors").write_bytes(b"half")
    stale_file = tmp_path / f".page.html.tmp-{pid}-xyz.html"
    stale_file.write_text("<!doctype html> half a page")
    live = tmp_path / f".page.html.tmp-{os.getpid()}-live.html"  # a writer still running (this one)
    live.write_text("in progress")
    _directory(tmp_path / "ckpt")
    write_atomically(tmp_path / "page.html", "<!doctype html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ckpt", "page.html", live.name])


def test_a_failed_write_leaves_the_old_file_and_no_staging(tmp_path):
    (tmp_path / "out.png").write_bytes(b"old picture")
    with pytest.raises(RuntimeError), atomic_file(tmp_path / "out.png") as staging:
        staging.write_bytes(b"half a new pic")
        raise RuntimeError("the figure failed")
    assert (tmp_path / "out.png").read_bytes() == b"old picture"
    assert [p.name for p in tmp_path.iterdir()] == ["out.png"]
