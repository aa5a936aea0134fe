"""Every size from a spec or a flag is bounded before anything is sized by it (issue 22, item 6).

Each refusal is one ``blockspec: error:`` line, exit 2, and writes nothing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from blockspec.cli import main
from blockspec.spec.schema import MAX_CONTEXT_LENGTH, MAX_HEADS, MAX_VOCAB_SIZE, MAX_WIDTH

SPECS = Path(__file__).resolve().parents[2] / "examples" / "specs"
TINY = SPECS / "tiny-shakespeare.toml"


def refused(capsys, *argv: str) -> str:
    """Run the command in-process; it must exit 2 with one error line, which is returned."""
    code = main([*argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("blockspec: error: "), err
    return err[0]


def spec_with(tmp_path: Path, **sizes: int) -> Path:
    text = TINY.read_text(encoding="utf-8")
    for key, value in sizes.items():
        text = "\n".join(f"{key} = {value}" if line.startswith(f"{key} = ") else line for line in text.splitlines())
    path = tmp_path / "spec.toml"
    path.write_text(text + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(("field", "too_many", "extra"), [
    ("vocab_size", MAX_VOCAB_SIZE + 1, {}),
    ("context_length", MAX_CONTEXT_LENGTH + 1, {}),
    ("d_ff", MAX_WIDTH + 1, {}),
    ("n_heads", MAX_HEADS * 2, {"d_model": MAX_HEADS * 2}),
    ("n_layers", 10**12, {}),
])
def test_a_spec_size_past_its_bound_is_refused_at_its_field(capsys, tmp_path, field, too_many, extra):
    line = refused(capsys, "check", str(spec_with(tmp_path, **{field: too_many, **extra})))
    assert f"$.model.{field}: expected " in line and str(too_many) in line


def test_the_largest_sizes_a_spec_may_hold_still_check(capsys, tmp_path):
    spec = spec_with(tmp_path, vocab_size=MAX_VOCAB_SIZE)
    assert main(["check", str(spec)]) == 0


def test_a_tokenizer_vocabulary_past_the_spec_bound_is_refused_without_a_rust_abort(tmp_path):
    """A subprocess: before the bound, the tokenizer library aborted the process (exit 134)."""
    text = tmp_path / "text.txt"
    text.write_text("to be or not to be\n" * 50, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "blockspec", "tokenizer", "train", str(text), "--vocab-size",
                           "1000000000", "--out", str(tmp_path / "tok")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "blockspec: error: --vocab-size: expected at most 16,777,216 tokens (as a spec's [model] vocab_size), "
        "found 1,000,000,000"]
    assert not (tmp_path / "tok").exists()


def test_a_batch_size_past_its_bound_is_a_usage_error(capsys, tmp_path):
    line = refused(capsys, "train", str(TINY), "--data", str(TINY), "--batch-size", str(2**40),
                   "--out", str(tmp_path / "ck"))
    assert line.startswith("blockspec: error: --batch-size: expected an integer from 1 to 1_048_576")
    assert not (tmp_path / "ck").exists()


def test_a_sweep_of_too_many_runs_is_refused_before_any_variant_is_built(capsys, tmp_path):
    values = ",".join(str(16 * (i + 1)) for i in range(101))
    line = refused(capsys, "sweep", str(TINY), "--data", str(TINY), "--vary", f"model.d_ff={values}",
                   "--vary", f"model.d_model={','.join(str(4 * (i + 1)) for i in range(100))}",
                   "--out", str(tmp_path / "sweep"))
    assert "--vary: expected at most 10,000 runs (variants × seeds), found 10,100" in line
    assert not (tmp_path / "sweep").exists()


def test_a_trace_longer_than_its_bound_is_refused_before_the_model_is_built(capsys):
    ids = ",".join(["1"] * (2**16 + 1))
    line = refused(capsys, "trace", str(TINY), "--ids", ids)
    assert "--ids: expected at most 65,536 tokens to trace, found 65,537" in line
