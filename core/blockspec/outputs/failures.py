"""An OSError while writing an output, said as one line: the output's path, the reason, and the space.

The writers (``atomic_directory``, ``atomic_file``) wrap their work in ``output_errors``, so a full
disk, a file-size limit, a read-only file system or a missing permission reaches a user as an
``OutputError`` naming the output (not the hidden staging name) and, for want of space, how much
was needed (when the writer knows) or written before it failed, and how much is free.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from blockspec.errors import OutputError, Problem

NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


@contextmanager
def output_errors(target: Path, *, staging: Path | None = None, needed: int | None = None) -> Iterator[None]:
    """Turn an OSError inside the block into an ``OutputError`` about ``target``.

    ``staging`` is where the block writes (its size says what was written before a failure);
    ``needed``, the bytes the output takes, where the writer knows it.
    """
    try:
        yield
    except OSError as error:
        raise write_failure(target, error, staging=staging, needed=needed) from error


def write_failure(target: Path, error: OSError, *, staging: Path | None = None,
                  needed: int | None = None) -> OutputError:
    """The one-line error for ``error`` met while writing ``target``."""
    place = _place(target, error, staging)
    reason = error.strerror or str(error)
    if error.errno not in NO_SPACE:
        return OutputError(Problem(file=place, message=f"cannot be written: {reason}",
                                   hint="choose a place this process can write"))
    space = _space(target, error, staging, needed)
    return OutputError(Problem(file=place, message=f"cannot be written: {reason}{space}", hint=_space_hint(error)))


def _place(target: Path, error: OSError, staging: Path | None) -> str:
    """The output's own name, unless the failing file is one the writer read (an input)."""
    if error.filename is None or staging is None:
        return str(target)
    failing = Path(os.fsdecode(error.filename)).absolute()
    inside = failing == staging.absolute() or staging.absolute() in failing.parents
    return str(target) if inside or failing.name.startswith(f".{target.name}.tmp-") else str(failing)


def _space(target: Path, error: OSError, staging: Path | None, needed: int | None) -> str:
    """What the output needed (or had written when it failed) and what the place allows."""
    parts = []
    if needed is not None:
        parts.append(f"it needs {byte_size(needed)}")
    elif staging is not None and staging.exists() and tree_size(staging):
        parts.append(f"{byte_size(tree_size(staging))} were written before it failed")
    allowed = _size_limit() if error.errno == errno.EFBIG else _free_space(target)
    if allowed is not None:
        parts.append(f"{byte_size(allowed)} {'per file allowed' if error.errno == errno.EFBIG else 'free there'}")
    return f" ({', '.join(parts)})" if parts else ""


def _space_hint(error: OSError) -> str:
    if error.errno == errno.EFBIG:
        return "raise the file-size limit (ulimit -f) or choose another place"
    return "free some space or choose another place"


def _size_limit() -> int | None:
    """This process's file-size limit (``ulimit -f``), where there is one."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def _free_space(target: Path) -> int | None:
    existing = target.absolute().parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        return shutil.disk_usage(existing).free
    except OSError:
        return None


def tree_size(root: Path) -> int:
    """Bytes in the files under ``root`` (or of ``root`` itself, a file)."""
    if not root.is_dir():
        return root.stat().st_size
    return sum((Path(d) / name).stat().st_size for d, _, files in os.walk(root) for name in files)


def byte_size(count: int) -> str:
    """1536 -> '1.5 KiB': sizes as a person reads them."""
    size, unit = float(count), "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            break
        size /= 1024
    return f"{count} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
