"""Render explorer data into one self-contained HTML file: data, script and style inline, no network."""

from __future__ import annotations

import json
import os
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import Any

from blockspec.checkpoint.outputs import file_mode

PLACEHOLDER = "__BLOCKSPEC_DATA__"


def render(data: dict[str, Any]) -> str:
    """The page's HTML with ``data`` embedded as JSON (safe inside a <script> element)."""
    template = files(__package__).joinpath("template.html").read_text(encoding="utf-8")
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False)  # export nulls non-finite
    payload = payload.replace("<", "\\u003c")  # no "</script>" or "<!--" can end the element early
    return template.replace(PLACEHOLDER, payload, 1)


def write_page(data: dict[str, Any], out: str | Path) -> Path:
    """Write atomically: a reader never sees half a page; the mode is what the umask gives a plain open."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(render(data))
        os.chmod(temporary, file_mode())  # mkstemp's 0o600 would hide the page from everyone else
        os.replace(temporary, out)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return out

