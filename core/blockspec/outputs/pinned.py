"""Reading a directory as one tree while a writer replaces it.

A writer replaces an output by exchanging whole directories (``checkpoint/atomic.py``): the path names
the old tree or the new one, never a mix. A reader that opens the path once per file can still mix them:
the manifest from one save, the weights from the next. So a reader pins the tree: it opens the directory
once and every file relative to that descriptor (``PinnedDirectory``), so all its files come from the one
tree the path named then, whatever is renamed meanwhile.

A replaced tree is then deleted, and a pinned reader would find its files gone. So the reader holds a
shared flock on the directory, and the writer deletes a tree only under an exclusive one
(``retire_directory``): it waits for the tree's readers. Readers never delay a replacement, only the
removal of what it replaced; and reading needs no write permission anywhere.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

Opener = Callable[[str, int], int]  # what ``open(..., opener=)`` takes
_ATTEMPTS = 20  # trees retired between our open and our lock, before giving up
_pins = threading.local()  # this thread's open pins, by absolute path
_NO_FLOCK = {errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOLCK, errno.EINVAL, errno.EBADF}


class PinnedDirectory:
    """A directory opened once: every name is looked up in that tree; ``path`` is what messages say."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd = path, fd

    def opener(self, file: str, flags: int) -> int:
        """For ``open(path, opener=...)``: ``path`` (under ``self.path``) opened in the pinned tree."""
        return os.open(Path(file).relative_to(self.path), flags | os.O_CLOEXEC, dir_fd=self.fd)

    def open(self, name: str) -> BinaryIO:
        return open(self.path / name, "rb", opener=self.opener)

    def read_bytes(self, name: str) -> bytes:
        with self.open(name) as handle:
            return handle.read()

    def stat(self, name: str) -> os.stat_result:
        """As ``Path.stat``: symbolic links followed (FileNotFoundError when there is nothing)."""
        return os.stat(name, dir_fd=self.fd)

    def is_file(self, name: str) -> bool:
        try:
            return stat.S_ISREG(self.stat(name).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def lexists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True


@contextmanager
def pinned_directory(path: str | Path) -> Iterator[PinnedDirectory]:
    """The tree at ``path`` now, held for reading until the block ends (OSError if it is not a directory).

    Nested in the same thread, a pin of the same path is the outer one: a caller that reads several
    things through functions that each pin (a resume: weights, optimizer, history) pins once around them.
    """
    pins: dict[str, PinnedDirectory] = _pins.__dict__.setdefault("open", {})
    key = os.path.abspath(path)
    if key in pins:
        yield pins[key]
        return
    tree = PinnedDirectory(Path(path), _open_pinned(path))
    pins[key] = tree
    try:
        yield tree
    finally:
        del pins[key]
        os.close(tree.fd)  # and with it the shared lock


def _open_pinned(path: str | Path) -> int:
    """A descriptor of the directory at ``path``, share-locked, and not retired meanwhile."""
    for _ in range(_ATTEMPTS):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _flock(fd, fcntl.LOCK_SH)
            if os.fstat(fd).st_nlink > 0:
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # retired while we waited for the lock: the path names a newer tree
    raise OSError(errno.EAGAIN, "replaced again and again while being opened; try again", str(path))


def retire_directory(path: Path) -> None:
    """Delete a tree a replacement took out of use, once the readers that pinned it are done."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _refuse_own_pin(fd, path)
        _flock(fd, fcntl.LOCK_EX)
        shutil.rmtree(path)
    finally:
        os.close(fd)


def _refuse_own_pin(fd: int, path: Path) -> None:
    """Waiting for our own shared lock would wait forever: a thread must not replace what it is reading."""
    mine = os.fstat(fd)
    for tree in _pins.__dict__.get("open", {}).values():
        pinned = os.fstat(tree.fd)
        if (pinned.st_dev, pinned.st_ino) == (mine.st_dev, mine.st_ino):
            raise RuntimeError(f"{tree.path}: replaced while this thread reads it through a pin; "
                               "read it all first, then write")


def _flock(fd: int, operation: int) -> None:
    """Block for the lock; on a file system without flock, go on unlocked (as before these locks)."""
    try:
        fcntl.flock(fd, operation)
    except OSError as error:
        if error.errno not in _NO_FLOCK:
            raise
