"""Every example in README.md and docs/*.md runs as written, so that none can go stale.

The rule (docs/architecture.md, "Writing docs", says the same):

- A ```console block is commands and their output: each `$ ` line is a command (a line ending
  in `\\` continues it), the lines after it up to the next `$ ` are what it prints (stdout and
  stderr together), and a line `...` stands for any number of lines. A command must exit 0,
  unless its shown output has an `error:` line: then it must fail.
- A ```sh block, and a bare ``` block whose first line starts with a command (`blockspec`,
  `python`, `pip`, `bash`, `torchrun`, or `NAME=value` before one, or `$ `), is commands, one a
  line (`\\` continues, `#` comments); each must exit 0. Any other bare block is shown text
  (output, a layout, a diagram) and is not run.
- A ```python block runs with `python`.
- A ```toml block must parse; one with a `[model]` table is a spec and must load.
- HTML comments on the lines just above a fence change this, one clause per comment:
  `<!-- example: slow: WHY -->` runs only with BLOCKSPEC_SLOW=1 or `-m slow`;
  `<!-- example: not run: WHY -->` never runs (a GPU, the network, a fragment, a synopsis);
  `<!-- example: needs NAME ... -->` prepares the named files first (PREPARED below);
  `<!-- example: continues -->` runs in the directory of the page's previous example, after it.

Each example (with the ones that continue it) runs in a fresh temporary directory holding a copy
of the repository's examples/ and `tinyshakespeare.txt` (the Tiny Shakespeare text the tests
use, tests/corpus.py; a made-up play when it is absent), so nothing is written into the repository.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from attrs import frozen

import blockspec

from .corpus import shakespeare_path, small_play

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*example:\s*(.*?)\s*-->\s*$")
COMMAND_START = re.compile(r"^(\$ |(\w+=\S*\s+)*(blockspec|python3?|pip|bash|torchrun)(\s|$))")
TIMEOUT_S = 900


@frozen
class Example:
    """One fenced block of a page: where it is, its language, its lines and its markers."""

    page: str
    line: int  # the 1-based line of its first body line
    lang: str
    body: tuple[str, ...]
    markers: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def marked(self, clause: str) -> str | None:
        """The first marker that starts with clause, or None."""
        return next((m for m in self.markers if m.startswith(clause)), None)

    @property
    def kind(self) -> str:
        """console, shell, python, toml or text (shown, never run)."""
        if self.lang in ("console", "python", "toml"):
            return self.lang
        first = next((line for line in self.body if line.strip()), "")
        if self.lang == "sh" or (self.lang == "" and COMMAND_START.match(first.strip())):
            return "console" if first.lstrip().startswith("$ ") else "shell"
        return "text"


def markers_above(lines: list[str], fence: int) -> tuple[str, ...]:
    """The `<!-- example: ... -->` comments on the lines just above a fence (blank lines skipped)."""
    found, index = [], fence - 1
    while index >= 0 and (not lines[index].strip() or MARKER.match(lines[index])):
        if match := MARKER.match(lines[index]):
            found.append(match.group(1))
        index -= 1
    return tuple(reversed(found))


def page_examples(page: str) -> list[Example]:
    """Every fenced block of one page, in order; the body is dedented (a block inside a list)."""
    lines, examples, index = (ROOT / page).read_text(encoding="utf-8").splitlines(), [], 0
    while index < len(lines):
        if match := FENCE.match(lines[index]):
            end = next(i for i in range(index + 1, len(lines)) if lines[i].strip() == "```")
            body = textwrap.dedent("\n".join(lines[index + 1:end])).splitlines()
            examples.append(Example(page, index + 2, match.group(2), tuple(body), markers_above(lines, index)))
            index = end
        index += 1
    return examples


ALL = [example for page in PAGES for example in page_examples(page)]


def cases() -> list[list[Example]]:
    """The examples that run, each with those that continue it (one directory per case)."""
    found: list[list[Example]] = []
    for example in ALL:
        if example.kind == "text" or example.marked("not run"):
            continue
        if example.marked("continues"):
            assert found and found[-1][0].page == example.page, f"{example.where}: continues no example"
            found[-1].append(example)
        else:
            found.append([example])
    return found


def case_param(case: list[Example]):
    slow = next((example.marked("slow") for example in case if example.marked("slow")), None)
    return pytest.param(case, id=case[0].where, marks=[pytest.mark.slow(slow[len("slow: "):])] if slow else [])


# -- what an example may need, by the name its `needs` marker gives -----------------------------

BAD_SPEC = """[model]
name = "t"
vocab_size = 65
d_model = "768"
context_length = 64
n_haeds = 12
n_layers = 2
d_ff = 256
[positional]
use = "learned"

[norm]
use = "rmsnrom"

[activation]
use = "gelu"

[head]
use = "lm"
"""


def write_checkpoint(path: Path) -> None:
    """tiny-shakespeare.toml built at seed 0 and saved: a checkpoint like any `train --out` writes."""
    spec = blockspec.load_spec(ROOT / "examples/specs/tiny-shakespeare.toml")
    blockspec.save(blockspec.build(spec, seed=0), path)


PREPARED: dict[str, Callable[[Path], object]] = {
    "bad.toml": lambda path: path.write_text(BAD_SPEC, encoding="utf-8"),
    "my-registry.toml": lambda path: path.write_text('[policy]\nload = "all"\ndeny = []\n', encoding="utf-8"),
    "tuned.bs": write_checkpoint,
    "spec.toml": lambda path: shutil.copy(ROOT / "examples/specs/tiny-shakespeare.toml", path),
    "play.txt": lambda path: path.write_text(small_play(), encoding="utf-8"),
}


def prepare(folder: Path, case: list[Example]) -> None:
    """examples/ copied, tinyshakespeare.txt, and every file the case's `needs` markers name."""
    shutil.copytree(ROOT / "examples", folder / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    text = shakespeare_path()
    (folder / "tinyshakespeare.txt").write_text(text.read_text(encoding="utf-8") if text else small_play(4000),
                                                encoding="utf-8")
    for example in case:
        for marker in example.markers:
            for name in marker.removeprefix("needs").split() if marker.startswith("needs") else ():
                PREPARED[name](folder / name)


# -- running ------------------------------------------------------------------------------------

def environment() -> dict[str, str]:
    """This interpreter's `python` and `blockspec` first on PATH; no debug tracebacks, no display."""
    env = {k: v for k, v in os.environ.items() if k not in ("BLOCKSPEC_DEBUG", "BLOCKSPEC_REGISTRY")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    return env


def commands(example: Example) -> list[tuple[int, str, list[str] | None]]:
    """(line, command, shown output or None) per command; `\\` joins lines."""
    found: list[tuple[int, str, list[str] | None]] = []
    pending = ""
    for offset, raw in enumerate(example.body):
        line = raw.rstrip()
        if example.kind == "console" and not pending and not line.startswith("$ "):
            if found:
                found[-1][2].append(line)
            continue
        text = line.removeprefix("$ ") if not pending else line
        if not pending and (not text.strip() or text.lstrip().startswith("#")):
            continue
        pending += text.removesuffix("\\") + (" " if text.endswith("\\") else "")
        if not text.endswith("\\"):
            found.append((example.line + offset, pending.strip(), [] if example.kind == "console" else None))
            pending = ""
    return found


def shown_pattern(shown: list[str]) -> re.Pattern[str]:
    """The shown lines as a pattern: each line literally (trailing blanks aside), `...` any lines."""
    while shown and not shown[-1].strip():
        shown = shown[:-1]
    parts = [r"(?:[^\n]*\n)*?" if line.strip() == "..." else re.escape(line.rstrip()) + r"[ \t]*\n"
             for line in shown]
    return re.compile("".join(parts) + r"\n*", re.DOTALL)


def run_commands(example: Example, folder: Path) -> None:
    for line, command, shown in commands(example):
        done = subprocess.run(["bash", "-c", command], cwd=folder, env=environment(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
        where = f"{example.page}:{line}: `{command}`"
        if shown:
            output = "".join(f"{out.rstrip()}\n" for out in done.stdout.splitlines())
            assert shown_pattern(shown).fullmatch(output), f"{where} printed\n{done.stdout}\nnot what the page shows"
            if any("error:" in out for out in shown):
                assert done.returncode != 0, f"{where} shows an error but exited 0"
                continue
        assert done.returncode == 0, f"{where} exited {done.returncode}:\n{done.stdout[-4000:]}"


def run_python(example: Example, folder: Path) -> None:
    script = folder / f"example_{example.line}.py"
    script.write_text("\n".join(example.body) + "\n", encoding="utf-8")
    done = subprocess.run([sys.executable, script.name], cwd=folder, env=environment(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
    assert done.returncode == 0, f"{example.where}: the Python example failed:\n{done.stdout[-4000:]}"


def run_toml(example: Example, folder: Path) -> None:
    text = "\n".join(example.body) + "\n"
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        pytest.fail(f"{example.where}: the TOML example does not parse: {error}")
    if "model" in table:  # a whole spec: it must load as one
        blockspec.loads_spec(text, file=example.where)


RUNNERS = {"console": run_commands, "shell": run_commands, "python": run_python, "toml": run_toml}


@pytest.mark.parametrize("case", [case_param(case) for case in cases()])
def test_example_runs_as_written(case: list[Example], tmp_path: Path) -> None:
    prepare(tmp_path, case)
    for example in case:
        RUNNERS[example.kind](example, tmp_path)


# -- the markers themselves ---------------------------------------------------------------------

CLAUSES = re.compile(r"^(slow: \S.*|not run: \S.*|needs( \S+)+|continues)$")


@pytest.mark.parametrize("example", [e for e in ALL if e.markers], ids=lambda e: e.where)
def test_every_marker_is_known_and_says_why(example: Example) -> None:
    for marker in example.markers:
        assert CLAUSES.match(marker), f"{example.where}: unknown example marker {marker!r}"
        for name in marker.split()[1:] if marker.startswith("needs") else ():
            assert name in PREPARED, f"{example.where}: needs {name!r}, which the test cannot prepare"


def test_the_rule_finds_the_examples() -> None:
    """The parser sees the blocks a reader sees: shell, console, Python and specs, on every page."""
    kinds = {example.kind for example in ALL}
    assert {"console", "shell", "python", "toml", "text"} <= kinds
    assert {example.page for example in ALL} >= {"README.md", "docs/training.md", "docs/trace.md"}
    assert len(cases()) >= 10
