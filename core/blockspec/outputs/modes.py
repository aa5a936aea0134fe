"""The modes new outputs get: what a plain open/mkdir would give them under the process's umask."""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path

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
