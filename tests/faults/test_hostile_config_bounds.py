"""Bounds before allocation for configs (issue 22, item 6, the file half): every size a config.json gives is
bounded where it is read, for each family, so nothing is sized by an oversized one, and the
refusal names the key the file gave (``$.num_hidden_layers``), not the spec field it would have set."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

from blockspec.errors import CheckpointError
from blockspec.interop.config_reader import SIZE_BOUNDS, ConfigReader
from blockspec.interop.hf_config import family_of, spec_dict

from ..conftest import ROOT
from ..test_families import EXAMPLES, NAMES

HUGE = 10**12


def bounded_keys(family: str) -> list[str]:
    """The size keys the family reads from its example config (whether the example sets them or not)."""
    config = EXAMPLES[family]
    reader = ConfigReader(config, "config.json")
    family_of(config, "config.json").spec_dict(reader, "m")
    return sorted(reader.read & set(SIZE_BOUNDS))


CASES = [(family, key) for family in NAMES for key in bounded_keys(family)]


def refusal(config: dict) -> CheckpointError:
    with pytest.raises(CheckpointError) as caught:
        spec_dict(config, file="config.json", name="m")
    return caught.value


@pytest.mark.parametrize(("family", "key"), CASES, ids=[f"{f}-{k}" for f, k in CASES])
@pytest.mark.parametrize("value", [HUGE, 2**63, -1])
def test_an_oversized_size_is_refused_at_its_own_key(family, key, value):
    size = [EXAMPLES[family].get("layer_types", ["full_attention"])[0]] * min(value, 2000) if key == "layer_types" \
        else value
    if key == "layer_types" and value < 0:
        pytest.skip("a list has no negative length")
    error = refusal({**EXAMPLES[family], key: size})
    assert [p.path for p in error.problems] == [f"$.{key}"], str(error)
    assert "expected" in str(error) and f"{SIZE_BOUNDS[key]:,}" in str(error)


def test_every_family_reads_its_layer_count_bounded():
    layer_keys = {family: [k for k in bounded_keys(family) if k in ("num_hidden_layers", "n_layer")]
                  for family in NAMES}
    assert all(layer_keys.values()), layer_keys


@pytest.mark.parametrize("family", NAMES)
def test_a_bound_itself_is_not_what_refuses(family):
    """At the bound a size is still read: whatever is refused then is refused for another reason."""
    config = {**EXAMPLES[family], **{k: SIZE_BOUNDS[k] for k in bounded_keys(family) if k != "layer_types"}}
    try:
        spec_dict(config, file="config.json", name="m")
    except CheckpointError as error:
        assert "far above any published model" not in str(error)


def run_bounded(*argv: str, memory: int = 3 << 30) -> subprocess.CompletedProcess:
    """The command in a child process that may not map more than ``memory`` bytes (a leak dies, not the host)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run([sys.executable, "-m", "blockspec", *argv], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, preexec_fn=limit)


@pytest.mark.parametrize("family", ["qwen2", "gemma2"])  # qwen3 shares qwen2's windows
def test_show_of_a_trillion_layer_config_is_one_line_and_bounded(family, tmp_path):
    """The reported case (Qwen2: 7 GB after 60 s), and Gemma 2, whose per-layer windows mirror it."""
    (tmp_path / "config.json").write_text(json.dumps({**EXAMPLES[family], "num_hidden_layers": HUGE}))
    done = run_bounded("show", str(tmp_path))
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("blockspec: error: ") and "$.num_hidden_layers: expected an integer from 0 to 1,024" \
        in lines[0], lines[0]
