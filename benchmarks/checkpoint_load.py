"""blockspec.save/load against a peer in the same run: plain safetensors + load_state_dict.

The peer does what a hand-written loader does (build the model, safetensors.torch.load_file,
load_state_dict) and verifies nothing; blockspec.load also checks the manifest (sha256 of the
file and of every tensor), the lock and every tensor's name and shape. Reported as ratios.

    python benchmarks/checkpoint_load.py [SPEC] [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from safetensors.torch import load_file, save_file

import blockspec
from blockspec.checkpoint.weights import unique_state

ROOT = Path(__file__).resolve().parents[1]


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default=str(ROOT / "examples" / "specs" / "gpt2-small.toml"))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    registry = blockspec.load_registry()
    spec = blockspec.load_spec(args.spec, registry)
    model = blockspec.build(spec, registry=registry, seed=0)
    blockspec.build(spec, registry=registry, device="meta")  # warm the meta-device code paths once
    with tempfile.TemporaryDirectory() as tmp:
        ours, peer = Path(tmp) / "ckpt", Path(tmp) / "peer.safetensors"
        tensors = {k: v.detach().contiguous() for k, v in unique_state(model).items()}

        def peer_load() -> None:
            fresh = blockspec.build(spec, registry=registry, seed=0)
            fresh.load_state_dict(load_file(str(peer)), strict=False)

        rows = {
            "save": ([timed(lambda: blockspec.save(model, ours)) for _ in range(args.repeats)],
                     [timed(lambda: save_file(tensors, str(peer))) for _ in range(args.repeats)]),
            "load": ([timed(lambda: blockspec.load(ours, registry=registry)) for _ in range(args.repeats)],
                     [timed(peer_load) for _ in range(args.repeats)]),
        }
    size = sum(t.numel() * t.element_size() for t in tensors.values()) / 2**20
    print(f"{spec.model.name}: {size:.0f} MiB of tensors, median of {args.repeats}")
    for what, (mine, theirs) in rows.items():
        a, b = statistics.median(mine), statistics.median(theirs)
        print(f"{what}: blockspec {a:.2f} s, peer {b:.2f} s, ratio {a / b:.2f}")


if __name__ == "__main__":
    main()
