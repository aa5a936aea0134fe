"""Where an output is written before it takes its place, and cleaning up after writers that were killed.

A staging entry (a directory for ``atomic_directory``, a file for ``atomic_file``) sits beside its
target as ``.<name>.tmp-<pid>-<random>``: hidden, on the same file system, and named after the
process writing it, so the next writer of the same target removes it once that process is gone.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def staging_prefix(target: Path) -> str:
    """The start of every staging name of ``target`` (``.name.tmp-``)."""
    return f".{target.name}.tmp-"


def own_staging_prefix(target: Path) -> str:
    """This process's staging names for ``target``: ``mkdtemp``/``mkstemp`` add the random part."""
    return f"{staging_prefix(target)}{os.getpid()}-"


def remove_stale_staging(target: Path) -> list[Path]:
    """Delete staging entries of writers that were killed: their process no longer exists."""
    removed = []
    for staging in target.parent.glob(f"{staging_prefix(target)}*"):
        pid_text = staging.name.removeprefix(staging_prefix(target)).split("-", 1)[0]
        if pid_text.isdigit() and not alive(int(pid_text)):
            _remove(staging)
            removed.append(staging)
    return removed


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (ours or someone else's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _remove(staging: Path) -> None:
    if staging.is_dir() and not staging.is_symlink():
        shutil.rmtree(staging, ignore_errors=True)
    else:
        staging.unlink(missing_ok=True)
