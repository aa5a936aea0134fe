"""The mixture-of-experts layer against Hugging Face's MixtralSparseMoeBlock, same config, same weights, CPU.

Checks the two compute the same function (max |difference| < 1e-5), then times forward and
forward + backward in interleaved rounds and reports median ratios blockspec / HF (target <= 1.0):

    python benchmarks/moe.py [--tokens T] [--rounds R] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
for plugin in ("moe", "activations"):  # importable from a checkout that has not pip-installed them
    sys.path.insert(0, str(ROOT / "plugins" / plugin))
sys.path.insert(0, str(ROOT))

from benchmarks.timing import interleave  # noqa: E402

CONFIG = {"d_model": 128, "d_ff": 256, "n_experts": 8, "top_k": 2}


def build_pair(implementation: str | None, seed: int = 0):
    from blockspec_activations.modules import SwiGLU
    from blockspec_moe.modules import MixtureOfExperts
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    torch.manual_seed(seed)
    ours = MixtureOfExperts(d_model=CONFIG["d_model"], d_ff=CONFIG["d_ff"], n_experts=CONFIG["n_experts"],
                            top_k=CONFIG["top_k"], renormalize=True, activation=SwiGLU(), bias=False)
    config = MixtralConfig(hidden_size=CONFIG["d_model"], intermediate_size=CONFIG["d_ff"],
                           num_local_experts=CONFIG["n_experts"], num_experts_per_tok=CONFIG["top_k"],
                           hidden_act="silu", router_jitter_noise=0.0)
    if implementation is not None:
        config._experts_implementation = implementation
    hf = MixtralSparseMoeBlock(config)
    with torch.no_grad():
        hf.gate.weight.copy_(ours.router.weight)
        hf.experts.gate_up_proj.copy_(ours.up)
        hf.experts.down_proj.copy_(ours.down)
    return ours, hf


def hf_output(hf, x):
    out = hf(x)
    return out[0] if isinstance(out, tuple) else out


def measure(implementation: str | None, tokens: int, rounds: int) -> dict:
    ours, hf = build_pair(implementation)
    x = torch.randn(4, tokens // 4, CONFIG["d_model"], generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        difference = (ours(x) - hf_output(hf, x)).abs().max().item()
    if difference > 1e-5:
        raise SystemExit(f"moe benchmark: outputs differ by {difference:.2e} (HF experts {implementation})")
    ours.train(), hf.train()  # HF's training mode computes the same (jitter noise 0); ours also keeps aux_loss
    xg = x.clone().requires_grad_(True)

    def forward(module, out=lambda m, v: m(v)):
        def run():
            with torch.no_grad():
                out(module, x)
        return run

    def training(module, out=lambda m, v: m(v)):
        def run():
            out(module, xg).square().mean().backward()
        return run

    for module, out in ((ours, lambda m, v: m(v)), (hf, hf_output)):
        # one training step each first: forward timed before any backward had run in the process came out
        # 1.4x slower for the first contender measured (first-use allocation), a cost of the order, not of the layer
        training(module, out)()
    fwd = interleave({"blockspec": forward(ours), "hf": forward(hf, hf_output)}, rounds=rounds)
    bwd = interleave({"blockspec": training(ours), "hf": training(hf, hf_output)}, rounds=rounds)

    def ratio(timings):
        return statistics.median(a / b for a, b in zip(timings["blockspec"].samples, timings["hf"].samples))

    return {"hf_experts": implementation or "default", "max_abs_difference": difference,
            "forward_ratio": ratio(fwd), "forward_backward_ratio": ratio(bwd),
            "forward_ms": {k: 1e3 * t.median for k, t in fwd.items()},
            "forward_backward_ms": {k: 1e3 * t.median for k, t in bwd.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512, help="tokens per batch (4 sequences)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--hf-experts", nargs="*", default=["default", "grouped_mm"],
                        help="HF experts implementations to compare against: default (its eager loop over the "
                             "experts hit), grouped_mm, batched_mm (slow on CPU: about 100x)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = []
    for implementation in args.hf_experts:
        try:
            results.append(measure(None if implementation == "default" else implementation, args.tokens,
                                   args.rounds))
        except (KeyError, ValueError, AttributeError, NotImplementedError) as error:
            results.append({"hf_experts": implementation, "skipped": f"{type(error).__name__}: {error}"})
    report = {"config": {**CONFIG, "tokens": args.tokens, "threads": args.threads, "rounds": args.rounds},
              "torch": torch.__version__, "results": results}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
