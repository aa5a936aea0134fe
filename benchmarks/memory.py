"""Peak memory of one training step on CPU, measured as resident-set growth in a fresh process.

tracemalloc does not see torch's allocations, and on CPU torch keeps no allocator
statistics, so each (case, model) runs in its own subprocess:

1. build the model and the batch, run one warm-up training step (one-time
   allocations: kernels' scratch space, thread pools) and drop its gradients;
2. return freed heap to the OS (``malloc_trim``; ``MALLOC_MMAP_THRESHOLD_`` makes
   large tensors mmap-backed, so freeing them shrinks RSS at once);
3. read VmRSS as the baseline, reset the kernel's high-water mark (write 5 to
   /proc/self/clear_refs), run one more step, read VmHWM.

peak - baseline is what the step itself needed: activations kept for backward,
gradients, and the transient buffers of the largest kernel. The parameters are
in the baseline, and are the same for every peer of a case. Heap noise moves
this by a few percent at the tiny size, so the runner repeats it and keeps the
median. A second, exact figure comes along: the bytes autograd saves for
backward (unique storages that are not parameters), from saved_tensors_hooks.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MMAP_THRESHOLD = str(64 * 1024)
CONTENDERS = ("blockspec", "reference", "hf")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _release_heap() -> None:
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def _step_peak_bytes(step) -> int:
    step()
    _release_heap()
    baseline = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    step()
    return (_status_kib("VmHWM") - baseline) * 1024


def _saved_bytes(model, forward) -> int:
    """Bytes of the distinct non-parameter storages autograd keeps for backward during ``forward()``."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        forward()
    return sum(saved.values())


def _worker(case_name: str, contender: str) -> dict[str, int]:
    import torch

    import blockspec
    from benchmarks.cases import by_name
    from benchmarks.models import make_contenders

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    (case,) = by_name([case_name])
    registry = blockspec.load_registry()
    model, run = make_contenders(case, registry, only=contender)[contender]
    ids = torch.randint(0, case.spec(registry).model.vocab_size, (case.batch, case.tokens))
    model.train()

    def loss() -> torch.Tensor:
        return torch.nn.functional.cross_entropy(run(model, ids).flatten(0, 1), ids.flatten())

    def step() -> None:
        model.zero_grad(set_to_none=True)
        loss().backward()

    peak = _step_peak_bytes(step)
    model.zero_grad(set_to_none=True)
    return {"peak_bytes": peak, "saved_for_backward_bytes": _saved_bytes(model, loss)}


def compare(case_name: str, threads: int, repeats: int = 3) -> dict[str, dict[str, int]]:
    """Every contender of a case, their fresh processes interleaved."""
    runs: dict[str, list[dict[str, int]]] = {name: [] for name in CONTENDERS}
    for _ in range(repeats):
        for name in CONTENDERS:
            runs[name].append(_measure_once(case_name, name, threads))
    return {name: _median_run(found) for name, found in runs.items()}


def _median_run(runs: list[dict[str, int]]) -> dict[str, int]:
    peaks = sorted(r["peak_bytes"] for r in runs)
    return {"peak_bytes": peaks[len(peaks) // 2], "peak_bytes_all": peaks,
            "saved_for_backward_bytes": runs[0]["saved_for_backward_bytes"]}


def _measure_once(case_name: str, contender: str, threads: int) -> dict[str, int]:
    """One fresh Python process."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD, "BENCH_THREADS": str(threads)}
    done = subprocess.run(
        [sys.executable, str(Path(__file__)), case_name, contender],
        capture_output=True, text=True, env=env, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"memory worker for {case_name}/{contender} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))  # the repository root holds the benchmarks package
    print(json.dumps(_worker(sys.argv[1], sys.argv[2])))
