"""Checking where an output will go, before any work is done; and the modes new files get.

Every command and API that writes a checkpoint, an export or a file calls
``check_writable_target`` first, so a refusal comes before training or importing, not after:

- an existing output is refused unless ``overwrite`` (the command line's ``--force``);
- a directory that is not a blockspec checkpoint is never replaced by one, nor is a file;
- an output that is, contains or lies inside one of the command's inputs is always refused;
- the nearest existing parent must be a directory this process can write.

The check is advice given early, not the guarantee: a checkpoint is created exclusively
(atomic.py), so a writer that appears between the check and the write still wins or loses whole.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from blockspec.checkpoint.layout import is_checkpoint
from blockspec.errors import CheckpointError, Problem

Kind = Literal["checkpoint", "directory", "file"]
LIBRARY_OPTION = "overwrite=True"


class OutputExistsError(CheckpointError):
    """The output exists and replacing it was not asked for; names the option that asks."""

    def __init__(self, path: str | Path, option: str = LIBRARY_OPTION) -> None:
        self.path, self.option = Path(path), option
        super().__init__(Problem(file=str(path), message="already exists", hint="pass {overwrite} to replace it",
                                 names={"overwrite": option}))

    def __reduce__(self):
        return type(self), (self.path, self.option)


def check_writable_target(
    path: str | Path,
    *,
    kind: Kind = "checkpoint",
    overwrite: bool = False,
    inputs: Iterable[str | Path | None] = (),
) -> Path:
    """Refuse ``path`` as an output now, with one line, if writing it later would fail or lose data.

    ``kind``: "checkpoint" (a blockspec checkpoint directory: only a checkpoint or an empty
    directory may be replaced), "directory" (an export: any directory with ``overwrite``) or
    "file". ``inputs`` are the paths the command reads; writing over any of them is refused
    whatever ``overwrite`` says.
    """
    target = Path(path)
    for source in inputs:
        if source is not None:
            _refuse_overlap(target, Path(source))
    _check_parent(target)
    if not os.path.lexists(target):
        return target
    if kind == "file":
        if target.is_dir():
            raise CheckpointError(f"{target}: is a directory; expected a file name")
    elif target.is_symlink() or not target.is_dir():
        raise CheckpointError(f"{target}: exists and is not a directory; refusing to replace it")
    elif not any(target.iterdir()):
        return target  # an empty directory: nothing to lose
    elif kind == "checkpoint" and not is_checkpoint(target):
        raise CheckpointError(f"{target}: exists and is not a blockspec checkpoint; refusing to replace it "
                              "(choose another path or remove it yourself)")
    if not overwrite:
        raise OutputExistsError(target)
    return target


def same_path(first: str | Path, second: str | Path) -> bool:
    """The same file or directory: equal once resolved, or the same inode (a hard link, a bind mount)."""
    a, b = Path(first), Path(second)
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _refuse_overlap(target: Path, source: Path) -> None:
    if same_path(target, source):
        raise CheckpointError(f"{target}: is the input {source}; refusing to write over the input")
    resolved_target, resolved_source = target.resolve(), source.resolve()
    if resolved_target in resolved_source.parents:
        raise CheckpointError(f"{target}: contains the input {source}; refusing to write over the input")
    if resolved_source in resolved_target.parents and source.is_dir():
        raise CheckpointError(f"{target}: lies inside the input {source}; refusing to write into the input")


def _check_parent(target: Path) -> None:
    """The nearest existing ancestor must be a directory we may create entries in (writers make the rest)."""
    parent = target.absolute().parent
    while not os.path.lexists(parent):
        parent = parent.parent
    if not parent.is_dir():
        raise CheckpointError(f"{target}: cannot be created: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CheckpointError(f"{target}: cannot be created: {parent} is not writable")


# ---------------------------------------------------------------- modes


_UMASK_LOCK = threading.Lock()


@functools.cache
def current_umask() -> int:
    """The process's umask, read once: from /proc where Linux shows it, else set-and-restore under a lock."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def file_mode() -> int:
    """What ``open(path, "w")`` would give a new file: 0o666 less the umask."""
    return 0o666 & ~current_umask()


def directory_mode() -> int:
    """What ``os.mkdir`` would give a new directory: 0o777 less the umask."""
    return 0o777 & ~current_umask()


def apply_umask(root: Path) -> None:
    """Give ``root`` and everything in it the modes a plain open/mkdir would have (mkdtemp/mkstemp use 0o700/0o600)."""
    os.chmod(root, directory_mode())
    for directory, subdirectories, files in os.walk(root):
        for name in subdirectories:
            os.chmod(Path(directory) / name, directory_mode())
        for name in files:
            os.chmod(Path(directory) / name, file_mode())
