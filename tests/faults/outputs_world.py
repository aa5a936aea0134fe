"""What the outputs fault tests share: one output of every kind, each command that writes one, and
a full or read-only place to write it (a small tmpfs where the machine lets us mount one, else a
file-size limit, RLIMIT_FSIZE, for the full disk)."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from attrs import frozen

from blockspec.cli import main

from ..cli_assets import Assets, make_assets

FAST = ["--batch-size", "4", "--eval-batches", "1", "--eval-every", "0", "--device", "cpu", "--quiet"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ROOM_LEFT = 2048  # bytes a full disk still has (the tokenizer.json here is 3.5 KB: it does not fit)


@frozen
class World:
    """One output of each kind (``outputs``, by command) and the inputs that made them."""

    assets: Assets
    tokenizer: Path
    outputs: dict[str, Path]


_WORLD: list[World] = []


def shared_world(tmp_path_factory) -> World:
    """The world, made once per session for every outputs fault test (it trains and exports: seconds)."""
    if not _WORLD:
        _WORLD.append(make_world(tmp_path_factory.mktemp("outputs-world")))
    return _WORLD[0]


def make_world(root: Path) -> World:
    assets = make_assets(root)
    tokenizer = root / "tok"
    outputs = {"train": assets.ckpt, "import-hf": root / "imported", "export-hf": assets.hf,
               "export": root / "weights", "tokenizer train": tokenizer, "data prepare": root / "prepared",
               "explore": root / "page.html", "trace --plot": root / "trace.png", "train --plot": root / "loss.png"}
    world = World(assets, tokenizer, outputs)
    for command, out in outputs.items():
        if not out.exists():
            assert main(command_line(world, command, out)) == 0, command
    return world


def command_line(world: World, command: str, out: Path, *, force: bool = False) -> list[str]:
    """The command line that writes ``out`` (a command name as in ``World.outputs``)."""
    a = world.assets
    train = ["train", str(a.spec), "--data", str(a.data), "--steps", "1", *FAST]
    lines = {
        "train": [*train, "--out", str(out)],
        "train --plot": [*train, "--plot", str(out)],
        "sweep": ["sweep", str(a.spec), "--data", str(a.data), "--vary", "model.d_ff=32,64", "--steps", "1",
                  *FAST[:-1], "--out", str(out)],
        "import-hf": ["import-hf", str(a.hf), "--out", str(out)],
        "export-hf": ["export-hf", str(a.char_ckpt), "--out", str(out)],
        "export": ["export", str(a.ckpt), "--weights-only", "--out", str(out)],
        "tokenizer train": ["tokenizer", "train", str(a.data), "--vocab-size", "300", "--out", str(out)],
        "data prepare": ["data", "prepare", str(a.data), "--tokenizer", str(world.tokenizer), "--out", str(out),
                         "--quiet"],
        "explore": ["explore", str(a.ckpt), "--text", "the lord", "--out", str(out)],
        "trace --plot": ["trace", str(a.ckpt), "--text", "the lord", "--plot", str(out)],
    }[command]
    return lines + (["--force"] if force else [])


def tree(path: Path) -> dict[str, bytes | None]:
    """Every entry under ``path`` (or the file itself): its bytes, None for a directory."""
    if not path.is_dir():
        return {".": path.read_bytes()}
    return {str(p.relative_to(path)): None if p.is_dir() else p.read_bytes() for p in sorted(path.rglob("*"))}


def run(capsys, argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def one_error_line(err: str) -> str:
    print(err)  # pytest -s shows what a user reads
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("blockspec: error: "), err
    assert "internal error" not in err and "Traceback" not in err, err
    return lines[0]


# ---------------------------------------------------------------- places that refuse writes


def can_mount() -> bool:
    """Whether tmpfs can be mounted here (root in a permissive sandbox); BLOCKSPEC_FAULTS_NO_MOUNT=1 says no."""
    if os.environ.get("BLOCKSPEC_FAULTS_NO_MOUNT"):
        return False
    probe = Path(os.environ.get("TMPDIR", "/tmp")) / f"blockspec-mount-probe-{os.getpid()}"
    probe.mkdir(exist_ok=True)
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
                                 capture_output=True).returncode == 0
        if mounted:
            subprocess.run(["umount", str(probe)], check=True)
        return mounted
    except (OSError, subprocess.CalledProcessError):
        return False
    finally:
        probe.rmdir()


@contextlib.contextmanager
def tmpfs(directory: Path, *, size: str = "16m", read_only: bool = False) -> Iterator[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], check=True)
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=True)


def remount_read_only(directory: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(directory)], check=True)


def fill(directory: Path, leave: int = ROOM_LEFT) -> Path:
    """Fill the file system of ``directory`` up to ``leave`` bytes: a real full disk."""
    filler = directory / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        block = b"\0" * 65536
        with contextlib.suppress(OSError):
            while os.write(descriptor, block):
                pass
    finally:
        os.close(descriptor)
    with contextlib.suppress(OSError):
        os.truncate(filler, max(filler.stat().st_size - leave, 0))
    return filler


@contextlib.contextmanager
def file_size_limit(limit: int = ROOM_LEFT) -> Iterator[None]:
    """Writes past ``limit`` bytes in one file fail with EFBIG (SIGXFSZ ignored), for this process only."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


@frozen
class FullDisk:
    """A directory and how to make it full: ``exhaust`` is entered once the old outputs are in place."""

    directory: Path
    exhaust: Callable[[], contextlib.AbstractContextManager]
    real: bool  # a tmpfs filled up (ENOSPC), else a file-size limit (EFBIG)
    spare: tuple[str, ...]  # entries of ``directory`` that are the filler, not outputs


NO_SPACE_WORDS = (os.strerror(errno.ENOSPC), os.strerror(errno.EFBIG))


@contextlib.contextmanager
def full_disk(tmp_path: Path) -> Iterator[FullDisk]:
    directory = tmp_path / "disk"
    if can_mount():
        with tmpfs(directory):
            @contextlib.contextmanager
            def exhaust():
                fill(directory)
                yield

            yield FullDisk(directory, exhaust, True, ("filler",))
    else:
        directory.mkdir()
        yield FullDisk(directory, file_size_limit, False, ())


def needs_mount() -> None:
    if not can_mount():
        pytest.skip("needs a read-only mount (mount -t tmpfs), which this machine refuses; tests run as root, "
                    "where permission bits do not stop a write")


def copy_output(source: Path, target: Path) -> None:
    shutil.copytree(source, target) if source.is_dir() else shutil.copy(source, target)
