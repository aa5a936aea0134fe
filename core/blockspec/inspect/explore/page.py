"""Render explorer data into one self-contained HTML file: data, script and style inline, no network."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Any

from blockspec.outputs.atomic_file import write_atomically
from blockspec.outputs.kinds import file_kind

PLACEHOLDER = "__BLOCKSPEC_DATA__"
TITLE = b"<title>blockspec explorer</title>"
# what ``explore --out`` replaces: an earlier explorer page (the template's title is in its head), nothing else
EXPLORER_PAGE = file_kind("a blockspec explorer page", signatures=(b"<!doctype html>",), contains=TITLE)


def render(data: dict[str, Any]) -> str:
    """The page's HTML with ``data`` embedded as JSON (safe inside a <script> element)."""
    template = files(__package__).joinpath("template.html").read_text(encoding="utf-8")
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False)  # export nulls non-finite
    payload = payload.replace("<", "\\u003c")  # no "</script>" or "<!--" can end the element early
    return template.replace(PLACEHOLDER, payload, 1)


def write_page(data: dict[str, Any], out: str | Path) -> Path:
    """Write atomically: a reader never sees half a page; the mode is what the umask gives a plain open."""
    return write_atomically(out, render(data))

