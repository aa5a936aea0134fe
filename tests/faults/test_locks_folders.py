"""Of two writers of one output folder, the second is refused at once, in one line, naming the first's pid.

The first writer is a real child process, held while it owns the folder (a sweep before its first run, a
``data prepare`` before its first token, a save before its weights). The second is this process: it must exit
2 with one ``blockspec: error:`` line naming the child's pid, and leave the folder byte-identical. A writer
killed with -9 leaves its lock file behind, and it blocks nobody (the kernel drops a dead process's flock).
"""

from __future__ import annotations

import json
import os

import pytest

import blockspec
from blockspec.cli import main

from .locks_children import Child, Holder, tiny_model, tree_bytes

FAST = ["--steps", "2", "--batch-size", "4", "--eval-batches", "1", "--eval-every", "0", "--device", "cpu"]
RACE_SECONDS = 1.5


def sweep_argv(spec, data, out) -> list[str]:
    return ["sweep", str(spec), "--data", str(data), "--vary", "positional.use=learned,sinusoidal", "--seeds", "0",
            "--out", str(out), *FAST]


def refused_by(holder: Holder, capsys) -> str:
    """The one error line this process printed; it names the holder's pid."""
    err = capsys.readouterr().err
    assert err.startswith("blockspec: error: ") and err.count("\n") == 1, err
    assert f"pid {holder.pid}" in err, err
    return err


def beside(folder) -> set[str]:
    """What lies next to an output folder, less the test's own signal files."""
    return {p.name for p in folder.parent.iterdir() if not p.name.endswith(("-ready", "-release"))}


def test_a_second_sweep_on_the_same_folder_is_refused_at_once_naming_the_first(inputs, tmp_path, capsys):
    spec, data = inputs
    out = tmp_path / "out"
    holder = Holder(tmp_path, "sweep", *sweep_argv(spec, data, out))
    try:
        holder.wait_ready()
        before, around = tree_bytes(out), beside(out)
        assert main(sweep_argv(spec, data, out)) == 2
        refused_by(holder, capsys)
        assert tree_bytes(out) == before and beside(out) == around
    finally:
        code = holder.finish()
    assert code == 0
    assert len(list((out / "runs").iterdir())) == 2 and beside(out) == {"tiny.toml", "play.txt", "out"}


def refused_while_held(what: str, argv: list[str], out, tmp_path, capsys) -> dict[str, bytes]:
    """Write a good ``out`` with ``argv``; while a child runs ``argv`` again, held, this process's ``argv`` is
    refused naming it and ``out`` stays byte-identical; the child then finishes. Returns the good output."""
    assert main(argv) == 0
    good = tree_bytes(out)
    holder = Holder(tmp_path, what, *argv)
    try:
        holder.wait_ready()
        assert main(argv) == 2
        refused_by(holder, capsys)
        assert tree_bytes(out) == good
    finally:
        code = holder.finish()
    assert code == 0
    return good


def test_a_second_data_prepare_into_the_same_folder_is_refused_and_the_old_data_survives(inputs, tmp_path, capsys):
    out = tmp_path / "data"
    argv = ["data", "prepare", str(inputs[1]), "--tokenizer", "char", "--out", str(out), "--force", "--quiet"]
    good = refused_while_held("prepare", argv, out, tmp_path, capsys)
    assert tree_bytes(out) == good  # the holder prepared the same text again


def test_a_second_train_into_the_same_checkpoint_is_refused_before_it_trains(inputs, tmp_path, capsys):
    spec, data = inputs
    out = tmp_path / "ck"
    argv = ["train", str(spec), "--data", str(data), "--out", str(out), "--force", *FAST, "--quiet"]
    refused_while_held("train", argv, out, tmp_path, capsys)
    blockspec.load(out)  # the holder's checkpoint, whole


def test_replacing_a_checkpoint_another_process_is_replacing_is_refused(tmp_path):
    checkpoint = tmp_path / "ck"
    blockspec.save(tiny_model(1), checkpoint)
    good = tree_bytes(checkpoint)
    holder = Holder(tmp_path, "save", str(checkpoint))
    try:
        holder.wait_ready()
        with pytest.raises(blockspec.BlockspecError, match=f"pid {holder.pid}"):
            blockspec.save(tiny_model(2), checkpoint, overwrite=True)
        assert tree_bytes(checkpoint) == good
    finally:
        code = holder.finish()
    assert code == 0
    assert tree_bytes(checkpoint) != good  # the holder's save went through
    blockspec.load(checkpoint)


@pytest.mark.parametrize("exchange", ["exchange", "fallback"])
def test_two_processes_replacing_one_checkpoint_in_a_loop_refuse_each_other_cleanly(tmp_path, exchange):
    """Each save succeeds whole or is refused naming the other writer; no other error, and the end loads.

    "fallback" is a file system without renameat2's exchange: there racing swaps used to fail mid-way.
    """
    checkpoint = tmp_path / "out" / "ck"
    blockspec.save(tiny_model(1), checkpoint)
    mode = [] if exchange == "exchange" else ["fallback"]
    writers = [Child("replace", str(checkpoint), str(RACE_SECONDS), str(tmp_path / f"{n}.json"), *mode)
               for n in range(2)]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    reports = [json.loads((tmp_path / f"{n}.json").read_text()) for n in range(2)]
    assert [r["other"] for r in reports] == [[], []], reports
    assert all(r["saved"] > 0 for r in reports) and sum(r["refused"] for r in reports) > 0, reports
    for mine, other in ((0, 1), (1, 0)):
        assert set(reports[mine]["named"]) <= {str(writers[other].pid)}, reports
    blockspec.load(checkpoint)
    assert beside(checkpoint) == {"ck"}


def test_a_writer_killed_with_minus_nine_leaves_a_lock_file_that_blocks_nobody(inputs, tmp_path):
    from blockspec.outputs.lock import lock_file_of

    spec, data = inputs
    out = tmp_path / "out"
    holder = Holder(tmp_path, "sweep", *sweep_argv(spec, data, out))
    holder.wait_ready()
    holder.kill()  # SIGKILL while it holds the folder
    stale = lock_file_of(out)
    assert stale.read_text().strip() == str(holder.pid)  # left behind, naming the dead writer
    assert main(sweep_argv(spec, data, out)) == 0  # resumes the killed sweep: nothing blocks it
    assert not os.path.lexists(stale) and len(list((out / "runs").iterdir())) == 2


def test_a_lock_file_that_is_a_symlink_or_a_users_file_is_never_written_through(tmp_path):
    """The lock file is truncated when taken: a hostile link there must not reach what it points at."""
    from blockspec.outputs.lock import lock_file_of

    checkpoint, secret = tmp_path / "ck", tmp_path / "notes.txt"
    secret.write_text("keep me")
    lock_file_of(checkpoint).symlink_to(secret)
    with pytest.raises(blockspec.BlockspecError, match="is a symbolic link; remove it"):
        blockspec.save(tiny_model(1), checkpoint)
    lock_file_of(checkpoint).unlink()
    lock_file_of(checkpoint).write_text("a user's file, not a pid\n")
    with pytest.raises(blockspec.BlockspecError, match="is not a blockspec lock file"):
        blockspec.save(tiny_model(1), checkpoint)
    assert secret.read_text() == "keep me" and not checkpoint.exists()
    assert lock_file_of(checkpoint).read_text() == "a user's file, not a pid\n"
