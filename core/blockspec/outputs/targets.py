"""Checking where an output will go, before any work is done.

Every command and API that writes an output calls ``check_writable_target`` first, so a refusal
comes before training or importing, not after:

- an existing output is refused unless ``overwrite`` (the command line's ``--force``);
- an existing path that is not an output of the same kind (``kinds.py``: a checkpoint, a prepared
  dataset, a sweep, an export, a tokenizer directory, a plot...) is never replaced, whatever
  ``overwrite`` says: blockspec replaces only what it wrote; an empty directory is taken;
- an output that is, contains or lies inside one of the command's inputs is always refused;
- the nearest existing parent must be a directory this process can write.

The check is advice given early, not the guarantee: a directory output is created exclusively
(``checkpoint/atomic.py``), so a writer that appears between the check and the write still wins
or loses whole.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from blockspec.errors import OutputError, Problem
from blockspec.outputs.kinds import OutputKind

LIBRARY_OPTION = "overwrite=True"


class OutputExistsError(OutputError):
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
    kind: OutputKind,
    overwrite: bool = False,
    inputs: Iterable[str | Path | None] = (),
) -> Path:
    """Refuse ``path`` as an output now, with one line, if writing it later would fail or lose data.

    ``kind`` says what the output is; an existing ``path`` is replaced (with ``overwrite``) only
    if it is one. ``inputs`` are the paths the command reads; writing over any of them is refused
    whatever ``overwrite`` says.
    """
    target = Path(path)
    for source in inputs:
        if source is not None:
            _refuse_overlap(target, Path(source))
    _check_parent(target)
    if not os.path.lexists(target):
        return target
    _refuse_another_kind(target, kind)
    if not overwrite and not _empty_directory(target):
        raise OutputExistsError(target)
    return target


def _refuse_another_kind(target: Path, kind: OutputKind) -> None:
    """An existing path that is not an output of ``kind``: never replaced."""
    if kind.is_file:
        if target.is_dir():
            raise OutputError(f"{target}: is a directory; expected a file name")
    elif target.is_symlink() or not target.is_dir():
        raise OutputError(f"{target}: exists and is not a directory; refusing to replace it")
    if _empty_directory(target):
        return  # nothing to lose
    reason = kind.mismatch(target)
    if reason is not None:
        raise OutputError(Problem(file=str(target), message=f"exists and is not {kind.what}; refusing to replace it "
                                                            f"({reason})",
                                  hint="choose another path or remove it yourself"))


def _empty_directory(target: Path) -> bool:
    return target.is_dir() and not target.is_symlink() and not any(target.iterdir())


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
        raise OutputError(f"{target}: is the input {source}; refusing to write over the input")
    resolved_target, resolved_source = target.resolve(), source.resolve()
    if resolved_target in resolved_source.parents:
        raise OutputError(f"{target}: contains the input {source}; refusing to write over the input")
    if resolved_source in resolved_target.parents and source.is_dir():
        raise OutputError(f"{target}: lies inside the input {source}; refusing to write into the input")


def _check_parent(target: Path) -> None:
    """The nearest existing ancestor must be a directory we may create entries in (writers make the rest)."""
    parent = target.absolute().parent
    while not os.path.lexists(parent):
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(f"{target}: cannot be created: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{target}: cannot be created: {parent} is not writable")
