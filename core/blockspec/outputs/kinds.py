"""What makes a path an output of one kind: the question ``--force`` asks before it replaces anything.

Each kind is defined where its layout lives (a checkpoint in ``checkpoint/layout.py``, a prepared
dataset in ``data/prepared.py``, ...), as a value this module knows nothing else about: the policy
(``targets.py``) only asks ``kind.mismatch(path)``. So blockspec replaces what it wrote, and a
directory that merely sits where an output should go (a user's notes, a downloaded model) is never
deleted, whatever the flag.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

HEAD_BYTES = 4096  # how much of a file its signature is looked for in


@dataclass(frozen=True, kw_only=True)
class OutputKind:
    """A kind of output: a directory with ``markers`` (and, if ``entries`` is set, nothing else), or a
    file whose first bytes start with one of ``signatures`` (and hold ``contains``, if set)."""

    what: str  # "a blockspec checkpoint": how a refusal names the kind
    is_file: bool = False
    markers: tuple[str, ...] = ()
    entries: frozenset[str] | None = None
    signatures: tuple[bytes, ...] = ()
    contains: bytes | None = None

    def mismatch(self, path: Path) -> str | None:
        """Why the existing ``path`` is not an output of this kind, or None when it is one."""
        return self._file_mismatch(path) if self.is_file else self._directory_mismatch(path)

    def _directory_mismatch(self, path: Path) -> str | None:
        missing = [name for name in self.markers if not _regular_file(path / name)]
        if missing:
            return f"it has no {missing[0]}"
        if self.entries is not None:
            foreign = sorted(entry.name for entry in path.iterdir() if entry.name not in self.entries)
            if foreign:
                return f"it holds {foreign[0]!r}, which is not one of its files"
        return None

    def _file_mismatch(self, path: Path) -> str | None:
        if not _regular_file(path):
            return "it is not a regular file"
        with open(path, "rb") as stream:
            head = stream.read(HEAD_BYTES)
        if self.signatures and not head.startswith(self.signatures):
            return "its content is not one"
        if self.contains is not None and self.contains not in head:
            return "its content is not one"
        return None


def directory_kind(what: str, *, markers: tuple[str, ...], entries: tuple[str, ...] | None = None) -> OutputKind:
    """A directory output: it holds every marker file; with ``entries``, no name outside them."""
    return OutputKind(what=what, markers=markers, entries=None if entries is None else frozenset(entries))


def file_kind(what: str, *, signatures: tuple[bytes, ...] = (), contains: bytes | None = None) -> OutputKind:
    """A single-file output, told by its first bytes."""
    return OutputKind(what=what, is_file=True, signatures=signatures, contains=contains)


def _regular_file(path: Path) -> bool:
    return path.is_file() and not os.path.islink(path)
