"""The hostile-directory fuzz of import-hf over every family (issue 22's acceptance): zero internal
errors, zero secrets read, a refused import leaves the good checkpoint byte-identical, peak memory under 1 GiB.

The fuzz runs in a child process (tests/faults/hostile_fuzz.py) so that its ru_maxrss is its own. Cases:
300 by default (about 30 s on 2 cores); ``HYPOTHESIS_PROFILE=thorough`` runs 3,000 (the acceptance's opt-in
profile, a few minutes); ``BLOCKSPEC_HOSTILE_FUZZ_CASES`` and ``BLOCKSPEC_HOSTILE_FUZZ_SEED`` override both.
A failing case is named by its seed and number, which reproduce it alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..conftest import ROOT

PEAK_MEMORY = 1 << 30
CASES = int(os.environ.get("BLOCKSPEC_HOSTILE_FUZZ_CASES",
                           3000 if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else 300))
SEED = int(os.environ.get("BLOCKSPEC_HOSTILE_FUZZ_SEED", "0"))


def test_hostile_directories_are_refused_in_one_line_and_leak_nothing():
    done = subprocess.run([sys.executable, "-m", "tests.faults.hostile_fuzz", "--cases", str(CASES),
                           "--seed", str(SEED)], capture_output=True, text=True, cwd=ROOT, timeout=60 + CASES)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    print(f"hostile fuzz: {report['cases']} cases, seed {SEED}: {report['outcomes']}, command line {report['cli']}, "
          f"peak {report['max_rss_bytes'] / 2**20:.0f} MiB")
    assert report["internal"] == [] and report["secrets"] == [] and report["changed"] == []
    assert sum(report["outcomes"].values()) == CASES and report["outcomes"].get("imported", 0) > 0
    assert report["max_rss_bytes"] < PEAK_MEMORY
