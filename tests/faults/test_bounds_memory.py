"""Memory is estimated on the meta device before train, sweep, generate and trace allocate (issue 22, item 6).

The machine's memory is replaced in-process by a tiny figure (``available_memory`` is the one place it is
read), so nothing here really allocates much; one subprocess shows the refusal under a real RLIMIT_AS.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from blockspec import load_spec
from blockspec.assembly import memory
from blockspec.assembly.assemble import build
from blockspec.cli import main
from blockspec.generation.tokens import generate

SPECS = Path(__file__).resolve().parents[2] / "examples" / "specs"
TINY = SPECS / "tiny-shakespeare.toml"
TEXT = "to be or not to be, that is the question: whether tis nobler in the mind to suffer\n" * 40


@pytest.fixture
def small_machine(monkeypatch):
    """A machine with 1 MiB free: the tiny model's training (about 8 MiB) does not fit."""
    monkeypatch.setattr(memory, "available_memory", lambda device: (2**20, "the machine has"))


@pytest.fixture
def text(tmp_path) -> Path:
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def one_error(capsys, *argv: str) -> str:
    code = main([*argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("blockspec: error: "), err
    return err[0]


def test_train_refuses_what_the_machine_cannot_hold_naming_the_flag(capsys, small_machine, text, tmp_path):
    line = one_error(capsys, "train", str(TINY), "--data", str(text), "--steps", "1", "--out", str(tmp_path / "ck"))
    assert "training with batches of 32 needs about" in line and "but the machine has 1.0 MiB available" in line
    assert "activations" in line and "lower --batch-size" in line and "pass --no-memory-check" in line
    assert not (tmp_path / "ck").exists()


def test_no_memory_check_trains_anyway(capsys, small_machine, text, tmp_path):
    assert main(["train", str(TINY), "--data", str(text), "--steps", "1", "--batch-size", "2", "--eval-batches", "1",
                 "--quiet", "--no-memory-check", "--out", str(tmp_path / "ck")]) == 0
    assert (tmp_path / "ck").is_dir()


def test_a_failed_train_keeps_the_previous_checkpoint_byte_identical(capsys, small_machine, text, tmp_path):
    out = tmp_path / "ck"
    main(["train", str(TINY), "--data", str(text), "--steps", "1", "--batch-size", "2", "--eval-batches", "1",
          "--quiet", "--no-memory-check", "--out", str(out)])
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    one_error(capsys, "train", str(TINY), "--data", str(text), "--steps", "1", "--force", "--out", str(out))
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_the_sweep_checks_its_variants_on_the_meta_device(capsys, text, tmp_path):
    """d_model = 2**20 needs 128 TiB: refused from the estimate, with the real machine's memory, in seconds."""
    line = one_error(capsys, "sweep", str(TINY), "--data", str(text), "--vary", "model.d_model=1048576",
                     "--out", str(tmp_path / "sweep"))
    assert "--vary model.d_model=1048576: training with batches of 32 needs about 128.2 TiB" in line
    assert "use smaller [model] sizes" in line and "--no-memory-check" in line
    assert not (tmp_path / "sweep").exists()


def test_trace_refuses_a_long_input_naming_the_flag(capsys, small_machine):
    line = one_error(capsys, "trace", str(SPECS / "llama-style.toml"), "--text", "a" * 4000)
    assert "tracing 4,000 tokens needs about" in line and "the stages a trace keeps" in line
    assert "trace a shorter --text" in line


def test_generate_refuses_a_cache_the_device_cannot_hold_before_making_it(small_machine):
    model = build(load_spec(SPECS / "llama-style.toml"), device="meta")  # its weights are not what is checked
    with pytest.raises(memory.MemoryEstimateError, match=r"generating 1,000,000 tokens needs about .*KV cache"):
        generate(model, torch.zeros((1, 3), dtype=torch.long, device="meta"), max_new_tokens=1_000_000)


@pytest.mark.parametrize("spec", ["llama-style", "gemma-2-2b", "mixtral-8x7b"])
def test_the_fitted_activations_are_the_measured_ones(spec):
    """The quadratic through three short lengths gives what the meta device measures at a long one."""
    model = memory.meta_model(load_spec(SPECS / f"{spec}.toml"), None).train()
    assert memory.fitted(lambda n: memory.saved_bytes(model, n), 96) == memory.saved_bytes(model, 96)


def test_the_refusal_comes_before_any_allocation_under_an_address_space_limit(tmp_path, text):
    """A 100 GB model under a 3 GiB RLIMIT_AS: the estimate's line, not a component's allocation failure."""
    spec = tmp_path / "big.toml"
    spec.write_text(TINY.read_text(encoding="utf-8").replace("d_model = 64", "d_model = 16384")
                    .replace("n_layers = 2", "n_layers = 8").replace("d_ff = 256", "d_ff = 65536"), encoding="utf-8")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))

    done = subprocess.run([sys.executable, "-m", "blockspec", "train", str(spec), "--data", str(text), "--steps", "1",
                           "--out", str(tmp_path / "ck")], capture_output=True, text=True, timeout=120,
                          preexec_fn=limit)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert "needs about" in lines[0] and "address-space limit (ulimit -v) leaves" in lines[0], lines[0]
    assert not (tmp_path / "ck").exists()
