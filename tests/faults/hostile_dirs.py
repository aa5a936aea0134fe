"""Small Hugging Face directories of every family, and the judge of what blockspec does with a hostile one.

``pristine(family)`` is a tiny exported model's files (config.json, model.safetensors), made once per
process; ``write(files, where)`` lays them out. ``cli(...)`` runs a command in-process and returns its exit
code and stderr lines. ``CANARY`` is the content of the secret a hostile directory links to: no output file
and no message may ever hold it. Shared by tests/faults/test_hostile_*.py and the fuzz (hostile_fuzz.py).
"""

from __future__ import annotations

import contextlib
import io
import os
from functools import cache
from pathlib import Path

import blockspec
from blockspec.cli import main
from blockspec.interop import export_hf

from ..test_families import NAMES, spec_of

CANARY = b"BLOCKSPEC-CANARY-5b1e9d-secret=hunter2"
FAMILIES = NAMES  # every family, in FAMILIES' order


@cache
def registry() -> blockspec.Registry:
    return blockspec.load_registry()


@cache
def _pristine(family: str, scratch: str) -> tuple[tuple[str, bytes], ...]:
    model = blockspec.build(spec_of(family, registry()), registry=registry(), seed=0)
    directory = export_hf(model, Path(scratch) / family)
    return tuple(sorted((path.name, path.read_bytes()) for path in directory.iterdir()))


def pristine(family: str, scratch: Path) -> dict[str, bytes]:
    """The files of a tiny exported ``family`` model (exported under ``scratch`` the first time)."""
    return dict(_pristine(family, str(scratch)))


def write(files: dict[str, bytes], where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (where / name).write_bytes(data)
    return where


def plant_canary(where: Path) -> Path:
    """The secret outside every model directory that hostile links point at."""
    secret = where / "secret.txt"
    secret.write_bytes(CANARY)
    return secret


def cli(*argv: str) -> tuple[int, list[str]]:
    """A command run in-process: its exit code and its stderr lines (stdout is dropped)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([str(arg) for arg in argv])
    return code, err.getvalue().splitlines()


def tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root`` (links by their target, files by their bytes), to compare before and after."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            found[name] = "-> " + os.readlink(path)
        elif path.is_file():
            found[name] = path.read_bytes()
        else:
            found[name] = "<dir>" if path.is_dir() else "<special>"
    return found


def holds_canary(root: Path) -> list[str]:
    """The regular files under ``root`` whose bytes hold the canary (links are not followed)."""
    return [str(path) for path in root.rglob("*")
            if path.is_file() and not path.is_symlink() and CANARY in path.read_bytes()]
