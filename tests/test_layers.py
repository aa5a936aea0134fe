"""The layers of docs/architecture.md are import-linter contracts; these tests show they bite.

Each case copies the package, adds one forbidden import, and runs ``lint-imports`` against the
copy with the project's own contracts: the run must fail and name the broken contract.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "core" / "blockspec"
LINT = Path(sys.executable).with_name("lint-imports")
LAYERS = "Layers: cli > inspect"

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (requirements-dev.txt)")


def lint(core: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(core)}
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=core, env=env, capture_output=True, text=True, timeout=120)


def copy_with(tmp_path: Path, module: str, line: str) -> Path:
    core = tmp_path / "core"
    shutil.copytree(PACKAGE, core / "blockspec", ignore=shutil.ignore_patterns("__pycache__"))
    target = core / "blockspec" / module
    target.write_text(target.read_text() + f"\n{line}\n")
    return core


def test_the_tree_keeps_every_contract():
    result = lint(PACKAGE.parent)
    assert result.returncode == 0, result.stdout[-2000:]
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("spec/kinds.py", "import torch", "The spec, the registry and the output policy import no torch"),
    ("registry/components.py", "from blockspec.assembly import assemble", LAYERS),
    ("modules/blocks.py", "from blockspec.checkpoint import directory", LAYERS),
    ("data/dataset.py", "from blockspec.cli import common", "Nothing imports the command line"),
    ("spec/strict.py", "from blockspec.spec import convert", "No import cycles between sibling modules"),
    ("plugin.py", "import torch", "The plugin API is as light as the spec layer: no torch at import"),
])
def test_a_forbidden_import_breaks_its_contract(tmp_path, module, line, contract):
    result = lint(copy_with(tmp_path, module, line))
    report = " ".join(result.stdout.split())  # lint-imports wraps long contract names
    assert result.returncode != 0
    assert re.search(re.escape(contract) + r"[^.]*? BROKEN", report), report[-2000:]


@pytest.mark.parametrize("argv", [["list"], ["list", "--json"], ["list", "--kind", "norm"]])
def test_cheap_commands_load_no_torch(argv):
    """`blockspec list` answers in a fraction of a second because nothing on its path imports torch."""
    code = ("import sys\nfrom blockspec.cli import main\ncode = main(%r)\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', code)" % (argv,))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "NO-TORCH 0", done.stdout + done.stderr
