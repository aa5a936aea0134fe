"""Advisory locks on output folders: of two processes writing one folder, the second is refused at once.

A writer holds ``flock(LOCK_EX | LOCK_NB)`` on ``.<name>.lock``, a file beside the folder in its parent:

- not inside the folder: a new folder does not exist yet, a replaced one is exchanged whole (a lock
  inside would leave with the old tree), an empty folder must stay empty, and a file inside would be
  one the manifest does not list, or one a copy or an export carries along;
- not the folder itself: its inode changes at every replacement, and readers hold shared locks on it
  (``pinned.py``), which must never make a writer be refused;
- not the parent: sibling outputs are independent.

The file holds the holder's pid, for the refusal. The kernel drops a flock when its holder dies, kill -9
included, so a file left by a dead writer blocks nobody: the next writer takes it over and, like every
holder, removes it when done. Re-entrant within a thread: a run's save, under the run's lock, takes it again.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from blockspec.errors import BlockspecError, OutputError, Problem
from blockspec.outputs.failures import output_errors, write_failure

LOCK_SUFFIX = ".lock"
_ATTEMPTS = 20  # takeovers of a file its holder removed while we opened it, before giving up
_PID_READS = 20  # 5 ms apart: how long a refused writer waits for a new holder to write its pid
_PID_TEXT = re.compile(rb"\d{0,20}\n?")
_held = threading.local()


class FolderLockedError(BlockspecError, RuntimeError):
    """Another process is writing the folder (``pid`` None: it could not be read), or it cannot be locked."""

    def __init__(self, path: str | Path, pid: int | None = None, reason: str | None = None) -> None:
        self.path, self.pid, self.reason = Path(path), pid, reason
        holder = f"pid {pid}" if pid is not None else "pid unknown"
        message = reason or f"is being written by another blockspec process ({holder})"
        hint = None if reason else "wait for it to finish, or write to another path"
        super().__init__(Problem(file=str(path), message=message, hint=hint))

    def __reduce__(self):
        return type(self), (self.path, self.pid, self.reason)


def lock_file_of(folder: str | Path) -> Path:
    """Where the lock of ``folder`` lives: ``.<name>.lock`` beside it."""
    absolute = Path(os.path.abspath(folder))
    return absolute.parent / f".{absolute.name}{LOCK_SUFFIX}"


@contextmanager
def folder_lock(folder: str | Path) -> Iterator[Path]:
    """Hold the write lock of ``folder`` (created or not yet); FolderLockedError at once if another holds it."""
    lock_path = lock_file_of(folder)
    held: dict[Path, int] = _held.__dict__.setdefault("depth", {})
    if lock_path in held:
        held[lock_path] += 1
        try:
            yield lock_path
        finally:
            held[lock_path] -= 1
        return
    fd = _acquire(lock_path, Path(folder))
    held[lock_path] = 1
    try:
        yield lock_path
    finally:
        del held[lock_path]
        _release(fd, lock_path)


def _acquire(lock_path: Path, folder: Path) -> int:
    """Lock the file at ``lock_path`` (made if missing) and write our pid in it; the fd holds the lock."""
    with output_errors(folder):
        lock_path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(_ATTEMPTS):
        fd = _open(lock_path, folder)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(fd)
            os.close(fd)
            raise FolderLockedError(folder, pid) from None
        if _is_current(fd, lock_path):
            try:
                with output_errors(folder):  # the pid needs a block: a full disk refuses it
                    return _claim(fd, lock_path)
            except OutputError:
                _release(fd, lock_path)  # the file we made: nothing is left beside the output
                raise
        os.close(fd)  # its holder removed this file as we opened it: lock the one at the path now
    raise FolderLockedError(folder, reason=f"its lock file {lock_path} keeps being replaced; try again")


def _open(lock_path: Path, folder: Path) -> int:
    try:  # never through a symbolic link: the file is truncated
        return os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as error:
        if error.errno != errno.ELOOP:  # a read-only place, a full disk: the output cannot be written there
            raise write_failure(folder, error) from None
        raise FolderLockedError(folder, reason=f"its lock file {lock_path} is a symbolic link; remove it") from None


def _claim(fd: int, lock_path: Path) -> int:
    """Write our pid over a dead holder's, unless the file is not a lock file (then it is left alone)."""
    if not _PID_TEXT.fullmatch(os.pread(fd, 64, 0)):
        os.close(fd)
        raise FolderLockedError(lock_path, reason="exists and is not a blockspec lock file; remove it")
    pid = f"{os.getpid()}\n".encode()
    os.pwrite(fd, pid, 0)
    os.ftruncate(fd, len(pid))  # a dead holder's longer pid: its tail goes
    return fd


def _holder(fd: int) -> int | None:
    """The pid in the lock file; its holder writes it just after locking, so an empty file is read again."""
    for _ in range(_PID_READS):
        text = os.pread(fd, 64, 0).strip()
        if text.isdigit():
            return int(text)
        time.sleep(0.005)
    return None


def _is_current(fd: int, lock_path: Path) -> bool:
    """Whether ``fd`` is still the file at ``lock_path`` (a holder that finished removed it)."""
    try:
        there = os.stat(lock_path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino)


def _release(fd: int, lock_path: Path) -> None:
    """Remove the file while still holding it (a waiter then sees it gone and retries), then unlock."""
    try:
        if _is_current(fd, lock_path):
            os.unlink(lock_path)
    finally:
        os.close(fd)
