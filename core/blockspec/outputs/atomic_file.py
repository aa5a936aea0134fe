"""Writing one file atomically: written beside, fsynced, then ``os.replace``d over the target.

A reader sees the old file or the new one, never half of either; a full disk or a kill leaves the
old file byte for byte (a killed writer's staging file is removed by the next writer, ``staging.py``).
Directories are ``checkpoint/atomic.py``'s ``atomic_directory``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from blockspec.outputs.failures import output_errors
from blockspec.outputs.modes import file_mode
from blockspec.outputs.staging import own_staging_prefix, remove_stale_staging


@contextmanager
def atomic_file(target: str | Path, *, needed: int | None = None) -> Iterator[Path]:
    """Yield a staging path beside ``target`` with its suffix (matplotlib picks a format by it); on a
    clean exit it replaces ``target``. Any OSError is an ``OutputError`` about ``target``."""
    target = Path(target)
    staging: Path | None = None
    with output_errors(target, needed=needed):
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            remove_stale_staging(target)
            handle, name = tempfile.mkstemp(dir=target.parent, prefix=own_staging_prefix(target), suffix=target.suffix)
            os.close(handle)
            staging = Path(name)
            yield staging
            _publish(staging, target)
        finally:
            if staging is not None:
                staging.unlink(missing_ok=True)


def write_atomically(target: str | Path, data: bytes | str) -> Path:
    """``target`` holds ``data`` (text is UTF-8), all or nothing."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_file(target, needed=len(payload)) as staging:
        staging.write_bytes(payload)
    return Path(target)


def _publish(staging: Path, target: Path) -> None:
    os.chmod(staging, file_mode())  # mkstemp's 0o600 would hide the file from everyone else
    fsync_path(staging)
    os.replace(staging, target)
    fsync_path(target.parent, os.O_RDONLY | os.O_DIRECTORY)


def fsync_path(path: Path, flags: int = os.O_RDONLY) -> None:
    """Make ``path``'s data (a file) or entries (a directory, with O_DIRECTORY) durable."""
    descriptor = os.open(path, flags)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
