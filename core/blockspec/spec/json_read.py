"""Reading a JSON object from an untrusted file: bounded in size, every defect a CheckpointError."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from blockspec.errors import CheckpointError


def read_json_object(path: Path, limit: int, *, what: str = "", hint: str = "",
                     opener: Callable[[str, int], int] | None = None) -> dict[str, Any]:
    """At most ``limit`` bytes of UTF-8 JSON holding an object; ``what`` names the file's role in messages.

    ``opener`` is ``open``'s (a pinned directory's, to read ``path`` in the tree it holds).
    """
    role = f" {what}" if what else ""
    try:
        with open(path, "rb", opener=opener) as handle:
            raw = handle.read(limit + 1)
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read{role}: {error.strerror}{hint}") from None
    if len(raw) > limit:
        raise CheckpointError(f"{path}: larger than the {limit}-byte limit{' for a' + role if role else ''}")
    return json_object(raw, path)


def json_object(raw: bytes, path: Path) -> dict[str, Any]:
    """UTF-8 JSON bytes holding an object (read from ``path``, which messages name); else CheckpointError."""
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise CheckpointError(f"{path}: not valid JSON ({type(error).__name__})") from None
    if not isinstance(document, dict):
        raise CheckpointError(f"{path}: $: expected a JSON object, found {type(document).__name__}")
    return document
