"""The mixture-of-experts layer against Hugging Face's MixtralSparseMoeBlock and DeepseekV3MoE (sigmoid,
group-limited routing with a correction bias, routed scaling, a shared expert), same weights, CPU.

Checks each pair computes the same function (max |difference| < 1e-5), then times forward and
forward + backward in interleaved rounds and reports median ratios blockspec / HF (target <= 1.0):

    python benchmarks/moe.py [--tokens T] [--rounds R] [--threads N] [--peers mixtral deepseek]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
for plugin in ("moe", "activations"):  # importable from a checkout that has not pip-installed them
    sys.path.insert(0, str(ROOT / "plugins" / plugin))
sys.path.insert(0, str(ROOT))

from benchmarks.layer_pair import timed_pair  # noqa: E402

CONFIG = {"d_model": 128, "d_ff": 256, "n_experts": 8, "top_k": 2}
DEEPSEEK = {"n_group": 4, "topk_group": 2, "routed_scaling": 2.5}  # and one shared expert


def build_pair(implementation: str | None, seed: int = 0, peer: str = "mixtral"):
    from blockspec_activations.modules import SwiGLU
    from blockspec_moe.modules import MixtureOfExperts
    from transformers import MixtralConfig

    if peer == "deepseek":
        return build_deepseek_pair(implementation, seed)
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


def build_deepseek_pair(implementation: str | None, seed: int = 0):
    """blockspec-moe with DeepSeek V3's routing and DeepseekV3MoE, the correction bias moved off zero."""
    from blockspec_activations.modules import SwiGLU
    from blockspec_moe.modules import MixtureOfExperts, RoutingRule
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

    torch.manual_seed(seed)
    c, rule = CONFIG, RoutingRule(scoring="sigmoid", correction=True, **DEEPSEEK)
    ours = MixtureOfExperts(d_model=c["d_model"], d_ff=c["d_ff"], n_experts=c["n_experts"], top_k=c["top_k"],
                            renormalize=True, activation=SwiGLU(), bias=False, n_shared_experts=1,
                            shared_activation=SwiGLU(), rule=rule)
    config = DeepseekV3Config(hidden_size=c["d_model"], moe_intermediate_size=c["d_ff"],
                              n_routed_experts=c["n_experts"],
                              num_experts_per_tok=c["top_k"], n_group=DEEPSEEK["n_group"],
                              topk_group=DEEPSEEK["topk_group"], routed_scaling_factor=DEEPSEEK["routed_scaling"],
                              norm_topk_prob=True, n_shared_experts=1, hidden_act="silu")
    if implementation is not None:
        config._experts_implementation = implementation
    hf = DeepseekV3MoE(config)
    with torch.no_grad():
        ours.correction.normal_(0.0, 0.1)
    copy_to_deepseek(ours, hf)
    return ours, hf


def copy_to_deepseek(ours, hf) -> None:
    """blockspec-moe's weights into DeepseekV3MoE: the router and its correction, the stacked experts (the same
    layout), and the shared expert's fused up split into gate_proj and up_proj."""
    with torch.no_grad():
        hf.gate.weight.copy_(ours.router.weight)
        hf.gate.e_score_correction_bias.copy_(ours.correction)
        hf.experts.gate_up_proj.copy_(ours.up)
        hf.experts.down_proj.copy_(ours.down)
        gate, up = ours.shared.up.weight.chunk(2)  # the gated activation's gate half first
        hf.shared_experts.gate_proj.weight.copy_(gate)
        hf.shared_experts.up_proj.weight.copy_(up)
        hf.shared_experts.down_proj.weight.copy_(ours.shared.down.weight)


def hf_output(hf, x):
    out = hf(x)
    return out[0] if isinstance(out, tuple) else out


def measure(implementation: str | None, tokens: int, rounds: int, peer: str = "mixtral") -> dict:
    ours, hf = build_pair(implementation, peer=peer)
    x = torch.randn(4, tokens // 4, CONFIG["d_model"], generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        difference = (ours(x) - hf_output(hf, x)).abs().max().item()
    if difference > 1e-5:
        raise SystemExit(f"moe benchmark: outputs differ by {difference:.2e} (HF experts {implementation})")
    ours.train(), hf.train()  # HF's training mode computes the same (jitter noise 0); ours also keeps aux_loss
    runs = {"blockspec": ours, "hf": lambda v: hf_output(hf, v)}
    return {"peer": peer, "hf_experts": implementation or "default", "max_abs_difference": difference,
            **timed_pair(runs, x, rounds)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512, help="tokens per batch (4 sequences)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--hf-experts", nargs="*", default=["default", "grouped_mm"],
                        help="HF experts implementations to compare against: default (its eager loop over the "
                             "experts hit), grouped_mm, batched_mm (slow on CPU: about 100x)")
    parser.add_argument("--peers", nargs="*", default=["mixtral", "deepseek"], choices=["mixtral", "deepseek"])
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = []
    for peer in args.peers:
        for implementation in args.hf_experts:
            try:
                results.append(measure(None if implementation == "default" else implementation, args.tokens,
                                       args.rounds, peer))
            except (KeyError, ValueError, AttributeError, NotImplementedError) as error:
                results.append({"peer": peer, "hf_experts": implementation,
                                "skipped": f"{type(error).__name__}: {error}"})
    report = {"config": {**CONFIG, "tokens": args.tokens, "threads": args.threads, "rounds": args.rounds},
              "torch": torch.__version__, "results": results}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
