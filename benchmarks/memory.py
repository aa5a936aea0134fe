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
in the baseline, and are the same for every peer of a case.
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


def _worker(case_name: str, contender: str) -> dict[str, int]:
    import torch

    import blockspec
    from benchmarks.cases import by_name
    from benchmarks.models import make_contenders

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    (case,) = by_name([case_name])
    models = make_contenders(case, blockspec.load_registry(), only=contender)
    model, run = models[contender]
    ids = torch.randint(0, case.spec(blockspec.load_registry()).model.vocab_size, (case.batch, case.tokens))
    model.train()

    def step() -> None:
        model.zero_grad(set_to_none=True)
        logits = run(model, ids)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()

    peak = _step_peak_bytes(step)
    model.zero_grad(set_to_none=True)
    return {"peak_bytes": peak}


def measure(case_name: str, contender: str, threads: int) -> int:
    """Peak training-step bytes of one contender, from a fresh Python process."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD, "BENCH_THREADS": str(threads)}
    done = subprocess.run(
        [sys.executable, str(Path(__file__)), case_name, contender],
        capture_output=True, text=True, env=env, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"memory worker for {case_name}/{contender} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_bytes"]


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))  # the repository root holds the benchmarks package
    print(json.dumps(_worker(sys.argv[1], sys.argv[2])))
