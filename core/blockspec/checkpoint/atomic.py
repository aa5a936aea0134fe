"""Writing a whole directory atomically: a kill at any moment leaves the old or the new one.

The new directory is written next to the target (same file system), given the modes the
umask asks for, every file and the directory are fsynced, then it takes the target's place in
one step.

Creating (``overwrite=False``) is exclusive: Linux's ``renameat2(RENAME_NOREPLACE)``, so of
two writers racing for the same new path exactly one succeeds and the other gets an
``OutputExistsError``. Where that call is unavailable, plain ``rename`` does the same for a
directory: POSIX never lets it replace a non-empty directory, and the staging directory is
never empty when it is installed. An existing *empty* directory may be taken.

Replacing (``overwrite=True``) uses ``renameat2(RENAME_EXCHANGE)``. Where the exchange is
unavailable the old directory is first renamed to ``.<name>.previous``; ``previous_of`` names
it, so a reader can fall back to it if a kill hit between the renames. Either way the old
directory is kept until the new one is complete, and deleted only once the readers that pinned it
are done (``outputs/pinned.py``).

Any OSError on the way (a full disk, a read-only place) is an ``OutputError`` naming the target
(``outputs/failures.py``); the staging directory is removed, and one left by a killed writer is
removed by the next writer of the same target (``outputs/staging.py``).

The writer holds the target's folder lock throughout (``outputs/lock.py``): a second process writing
the same target is refused at once, naming the first.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from blockspec.outputs.atomic_file import fsync_path as _fsync_path
from blockspec.outputs.failures import output_errors
from blockspec.outputs.modes import apply_umask
from blockspec.outputs.staging import own_staging_prefix, remove_stale_staging
from blockspec.outputs.targets import OutputExistsError
from blockspec.outputs.lock import folder_lock
from blockspec.outputs.pinned import retire_directory

AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV}


@contextmanager
def atomic_directory(target: Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty temporary directory; on a clean exit it atomically becomes ``target``.

    Without ``overwrite`` an existing ``target`` (other than an empty directory) is left alone
    and ``OutputExistsError`` raised, even if it appeared while the files were being written.
    """
    with output_errors(target):
        target.parent.mkdir(parents=True, exist_ok=True)
    with folder_lock(target):
        with output_errors(target):
            remove_stale_staging(target)
            staging = Path(tempfile.mkdtemp(prefix=own_staging_prefix(target), dir=target.parent))
        try:
            with output_errors(target, staging=staging):
                yield staging
                apply_umask(staging)
                sync_tree(staging)
                _install(staging, target, overwrite)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)


def previous_of(target: Path) -> Path:
    """Where the old directory waits while the fallback swap is under way."""
    return target.parent / f".{target.name}.previous"


def sync_tree(root: Path) -> None:
    """fsync every file, then every directory bottom-up, so the rename publishes durable data."""
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            _fsync_path(Path(directory) / name, os.O_RDONLY)
        _fsync_path(Path(directory), os.O_RDONLY | os.O_DIRECTORY)


def _install(staging: Path, target: Path, overwrite: bool) -> None:
    try:
        create_exclusive(staging, target)
    except FileExistsError:
        if not overwrite:
            raise OutputExistsError(target) from None
        _replace(staging, target)
    _fsync_path(target.parent, os.O_RDONLY | os.O_DIRECTORY)


def create_exclusive(source: Path, target: Path) -> None:
    """Rename the directory ``source`` to ``target``; FileExistsError if ``target`` exists (an empty directory may go)."""
    try:
        if rename_noreplace(source, target):
            return
    except FileExistsError:
        if not (target.is_dir() and not target.is_symlink() and not any(target.iterdir())):
            raise
    try:  # POSIX rename replaces at most an empty directory: another writer's full one makes it fail
        os.rename(source, target)
    except OSError as error:
        if isinstance(error, FileExistsError) or error.errno in (errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target)) from None
        raise


def _replace(staging: Path, target: Path) -> None:
    if exchange(staging, target):
        retire_directory(staging)  # staging now holds the old directory
    else:
        _swap_with_backup(staging, target)


def _swap_with_backup(staging: Path, target: Path) -> None:
    backup = previous_of(target)
    if backup.exists():
        retire_directory(backup)
    os.rename(target, backup)
    os.rename(staging, target)
    retire_directory(backup)


def exchange(first: Path, second: Path) -> bool:
    """Atomically swap two paths; False where the OS or file system cannot."""
    return _renameat2(first, second, RENAME_EXCHANGE)


def rename_noreplace(source: Path, target: Path) -> bool:
    """Rename unless ``target`` exists (FileExistsError then); False where the OS or file system cannot."""
    return _renameat2(source, target, RENAME_NOREPLACE)


def _renameat2(first: Path, second: Path, flags: int) -> bool:
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    result = renameat2(AT_FDCWD, os.fsencode(first), AT_FDCWD, os.fsencode(second), ctypes.c_uint(flags))
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    if code == errno.EEXIST:
        raise FileExistsError(code, os.strerror(code), str(second))
    raise OSError(code, os.strerror(code), str(second))
