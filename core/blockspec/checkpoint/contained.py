"""Reading a file of a directory one does not trust: it must stay inside, be a regular file, and be bounded.

A model directory is data from somewhere else. A name in it may be a link to a secret
(``tokenizer.json -> /proc/self/environ``, ``~/.ssh/id_rsa``), a FIFO or a device that blocks
or never ends, or a directory. Whatever reads such a file asks here first: the path, with every
link followed, must end inside one of the ``roots`` the caller allows (the directory itself; a
Hugging Face cache snapshot's ``blobs/`` too: ``interop.hf_layout``), and must be a regular file.
A non-regular file is never opened, so nothing can hang on it. Torch-free.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from blockspec.errors import CheckpointError, Problem

KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
# the most a small file a model comes with may hold (the largest published tokenizer.json is about 35 MB: Gemma's)
CARRIED_LIMIT = 64 * 1024 * 1024
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def contained_file(path: Path, roots: Sequence[Path]) -> os.stat_result:
    """The stat of the regular file ``path`` ends at, once it lies inside one of ``roots`` (resolved
    directories); CheckpointError in one line otherwise."""
    resolved = Path(os.path.realpath(path))
    if not any(resolved.is_relative_to(root) for root in roots):
        raise _refused(path, f"a link out of its directory (to {resolved})",
                       "blockspec reads only the files inside a model directory; copy the file in instead")
    try:
        found = os.stat(resolved)
    except OSError as error:
        raise _refused(path, f"cannot be read: {error.strerror}" + (" (a broken link)" if path.is_symlink() else "")) from None
    kind = next((name for test, name in KINDS if test(found.st_mode)), None)
    if kind is not None or not stat.S_ISREG(found.st_mode):
        raise _refused(path, f"is {kind or 'not a regular file'}, expected a regular file")
    return found


def read_contained(path: Path, roots: Sequence[Path], limit: int) -> bytes:
    """The bytes of ``path`` (at most ``limit``), checked as ``contained_file`` says, read from the very file
    that was checked."""
    checked = contained_file(path, roots)
    if checked.st_size > limit:
        raise _refused(path, f"{checked.st_size:,} bytes, more than the {limit:,}-byte limit for this file")
    try:
        descriptor = os.open(os.path.realpath(path), OPEN_FLAGS)
    except OSError as error:
        raise _refused(path, f"cannot be read: {error.strerror}") from None
    with os.fdopen(descriptor, "rb") as handle:
        opened = os.fstat(handle.fileno())
        if (opened.st_dev, opened.st_ino) != (checked.st_dev, checked.st_ino):
            raise _refused(path, "was replaced while it was read")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise _refused(path, f"more than the {limit:,}-byte limit for this file")
    return data


def _refused(path: Path, message: str, hint: str | None = None) -> CheckpointError:
    return CheckpointError(Problem(file=str(path), message=message, hint=hint))
