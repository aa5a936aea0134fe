"""Two ways to build without initialising twice, timed side by side (issue 12, item 9).

    python benchmarks/init_strategies.py [--repeats 7]

- deferred: today's build. A TorchFunctionMode records the ``nn.init`` calls made during
  construction and runs only those on tensors nothing overwrites afterwards.
- meta + to_empty: torchtitan's pattern. Construct on the meta device, allocate with
  ``to_empty``, then initialise explicitly: GPT-2's init for linears and embeddings,
  ``reset_parameters()`` for the rest. Computed buffers (RoPE and sinusoidal tables) come
  out of ``to_empty`` uninitialised, and only a new per-component init method could refill
  them, so models that have them are reported as n/a.
- eager: construction with every default init run, then GPT-2's init on top (the peer).

Prints medians in milliseconds and the ratios to eager.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import blockspec  # noqa: E402
from blockspec.assembly import assemble  # noqa: E402

SPECS = Path(__file__).resolve().parent.parent / "examples" / "specs"
CASES = ("tiny-shakespeare", "llama-style", "gpt2-small")


def deferred(spec, registry) -> nn.Module:
    return blockspec.build(spec, registry=registry, seed=0)


def eager(spec, registry) -> nn.Module:
    saved = assemble.DEFER_FROM_PARAMETERS
    assemble.DEFER_FROM_PARAMETERS = float("inf")
    try:
        return blockspec.build(spec, registry=registry, seed=0)
    finally:
        assemble.DEFER_FROM_PARAMETERS = saved


def meta_to_empty(spec, registry) -> nn.Module:
    torch.default_generator.manual_seed(0)
    model = blockspec.build(spec, registry=registry, device="meta").to_empty(device="cpu")
    for module in model.modules():
        if not isinstance(module, (nn.Linear, nn.Embedding)) and hasattr(module, "reset_parameters"):
            module.reset_parameters()
    _refuse_computed_buffers(model)
    assemble.init_weights(model, spec.model.n_layers)
    return model


def _refuse_computed_buffers(model: nn.Module) -> None:
    """``to_empty`` leaves computed buffers (position tables) as garbage: only their owner knows how to fill them."""
    persistent = set(model.state_dict())
    computed = [name for name, _ in model.named_buffers() if name not in persistent]
    if computed:
        raise NotImplementedError(f"{len(computed)} computed buffers ({computed[0]}, ...) would need a "
                                  "per-component init method, which the component contract does not have")


def median_ms(make, spec, registry, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        make(spec, registry)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    registry = blockspec.load_registry()
    print(f"{'case':18} {'eager':>9} {'deferred':>9} {'meta+to_empty':>14}  (median ms; ratio to eager)")
    for name in CASES:
        spec = blockspec.load_spec(SPECS / f"{name}.toml", registry)
        row = {}
        for label, make in (("eager", eager), ("deferred", deferred), ("meta", meta_to_empty)):
            try:
                row[label] = median_ms(make, spec, registry, args.repeats)
            except NotImplementedError as error:
                row[label] = None
                print(f"  {name}: meta+to_empty: {error}")
        cells = [f"{row[k]:9.1f}" if row[k] is not None else f"{'n/a':>9}" for k in ("eager", "deferred", "meta")]
        ratios = [f"{row[k] / row['eager']:.2f}" if row[k] is not None else "n/a" for k in ("deferred", "meta")]
        print(f"{name:18} {cells[0]} {cells[1]} {cells[2]:>14}  deferred {ratios[0]}, meta {ratios[1]}")


if __name__ == "__main__":
    main()
