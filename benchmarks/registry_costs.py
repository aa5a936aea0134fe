"""The registry's own costs, each in a fresh interpreter so nothing is cached from this process."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

DISCOVERY = """
import sys, time
t0 = time.perf_counter()
import blockspec
t1 = time.perf_counter()
registry = blockspec.load_registry()
t2 = time.perf_counter()
print({"import_s": t1 - t0, "load_registry_s": t2 - t1, "components": len(registry),
       "torch_imported": "torch" in sys.modules})
"""


def _python(code: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, check=True)


def discovery(repeats: int) -> dict[str, object]:
    """Import blockspec, then discover plugins and build the registry; torch must stay unimported."""
    runs = [eval(_python(DISCOVERY).stdout) for _ in range(repeats)]  # noqa: S307 - our own dict literal
    imported = _python("import blockspec; blockspec.load_registry()", "-X", "importtime").stderr
    torch_lines = [line for line in imported.splitlines() if line.rstrip().endswith(("| torch", "| torch._C"))]
    return {
        "import_s": statistics.median(r["import_s"] for r in runs),
        "load_registry_s": statistics.median(r["load_registry_s"] for r in runs),
        "total_s": statistics.median(r["import_s"] + r["load_registry_s"] for r in runs),
        "components": runs[0]["components"],
        "torch_imported": any(r["torch_imported"] for r in runs),
        "importtime_torch_lines": len(torch_lines),
        "repeats": repeats,
    }


def _wall(argv: list[str]) -> float:
    begin = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True)
    return time.perf_counter() - begin


def cli_list(repeats: int) -> dict[str, float]:
    """Wall time of ``blockspec list`` next to a bare interpreter start, interleaved."""
    script = shutil.which("blockspec", path=str(Path(sys.executable).parent)) or "blockspec"
    walls: dict[str, list[float]] = {"blockspec_list_s": [], "python_startup_s": []}
    for _ in range(repeats):
        walls["blockspec_list_s"].append(_wall([script, "list"]))
        walls["python_startup_s"].append(_wall([sys.executable, "-c", "pass"]))
    return {name: statistics.median(values) for name, values in walls.items()}


META_COUNT = """
import time, blockspec
registry = blockspec.load_registry()
spec = blockspec.load_spec({path!r}, registry)
blockspec.count_parameters(spec, registry)  # warm: torch and the modules imported once
times = []
for _ in range({repeats}):
    t = time.perf_counter(); count = blockspec.count_parameters(spec, registry); times.append(time.perf_counter() - t)
times.sort()
print({{"seconds": times[len(times) // 2], "max_s": times[-1], "parameters": count.exact}})
"""


def meta_count(spec_path: Path, repeats: int) -> dict[str, object]:
    """Build a 70B spec on the meta device and count its parameters; median seconds."""
    return eval(_python(META_COUNT.format(path=str(spec_path), repeats=repeats)).stdout)  # noqa: S307


if __name__ == "__main__":
    print(json.dumps({"discovery": discovery(3), "list": cli_list(3)}, indent=2))
