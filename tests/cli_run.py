"""Running a command in the test's own process: the one runner the CLI tests share."""

from __future__ import annotations

from blockspec.cli import main


def run(capsys, *argv: object) -> tuple[int, str, str]:
    """``blockspec ARGV`` here (so what it reads is this environment's plugins, not a fresh interpreter's):
    its exit code and what it printed, without anything printed before it."""
    capsys.readouterr()
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, out, err
