"""The built-in attention with sinks against Hugging Face's GptOssAttention, same weights, same RoPE, CPU.

Checks the two compute the same function (max |difference| < 1e-5), then times forward and
forward + backward in interleaved rounds and reports median ratios blockspec / HF (target <= 1.0).
blockspec runs the sinks through SDPA as one more key (zero key and value, the sink logit as its mask
entry); transformers' gpt-oss runs its eager attention, the only one of its own that takes sinks on CPU:

    python benchmarks/sinks.py [--tokens T] [--rounds R] [--threads N] [--window W]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "positional"))  # importable from a checkout that has not installed it
sys.path.insert(0, str(ROOT))

from benchmarks.layer_pair import timed_pair  # noqa: E402

CONFIG = {"d_model": 256, "n_heads": 8, "n_kv_heads": 2, "head_dim": 32, "base": 10000.0}


def build_pair(window: int | None, seed: int = 0):
    """blockspec's attention and rope, and gpt-oss's attention and rotary embedding, holding the same weights."""
    from blockspec_positional.rope import RotaryPositions
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention, GptOssRotaryEmbedding

    from blockspec.modules.attention import CausalSelfAttention

    torch.manual_seed(seed)
    c = CONFIG
    ours = CausalSelfAttention(d_model=c["d_model"], n_heads=c["n_heads"], n_kv_heads=c["n_kv_heads"], bias=True,
                               dropout=0.0, head_dim=c["head_dim"], sinks=True, sliding_window=window)
    config = GptOssConfig(hidden_size=c["d_model"], num_attention_heads=c["n_heads"], head_dim=c["head_dim"],
                          num_key_value_heads=c["n_kv_heads"], sliding_window=window or 128, attention_bias=True,
                          layer_types=["sliding_attention" if window else "full_attention"], num_hidden_layers=1,
                          rope_parameters={"rope_type": "default", "rope_theta": c["base"]})
    config._attn_implementation = "eager"
    hf = GptOssAttention(config, layer_idx=0)
    _copy_weights(ours, hf)
    return ours, RotaryPositions(c["head_dim"], 1 << 16, base=c["base"]), hf, GptOssRotaryEmbedding(config)


def _copy_weights(ours, hf) -> None:
    """HF's separate q, k, v projections stacked into blockspec's fused qkv rows; sinks moved off zero."""
    with torch.no_grad():
        ours.sinks.normal_(0.0, 1.0)
        ours.qkv.bias.normal_(0.0, 0.02)
        weights, biases = ours.qkv.weight.split(ours.split_sizes), ours.qkv.bias.split(ours.split_sizes)
        for name, weight, bias in zip(("q_proj", "k_proj", "v_proj"), weights, biases):
            getattr(hf, name).weight.copy_(weight)
            getattr(hf, name).bias.copy_(bias)
        hf.o_proj.weight.copy_(ours.proj.weight)
        hf.o_proj.bias.copy_(ours.proj.bias)
        hf.sinks.copy_(ours.sinks)


def hf_runner(hf, rotary, x: torch.Tensor, window: int | None):
    """gpt-oss's attention as its decoder layer calls it: cos/sin and the additive causal (windowed) mask."""
    from blockspec.modules.attention import causal_mask

    n = x.shape[1]
    positions = torch.arange(n)[None].expand(x.shape[0], -1)
    mask = causal_mask(n, n, x.device, x.dtype, window=window)[None, None]  # (1, 1, N, N)
    return lambda inputs: hf(inputs, rotary(inputs, positions), mask)[0]


def measure(tokens: int, rounds: int, window: int | None) -> dict:
    ours, positions, hf, rotary = build_pair(window)
    x = torch.randn(4, tokens // 4, CONFIG["d_model"], generator=torch.Generator().manual_seed(1))
    theirs = hf_runner(hf, rotary, x, window)
    with torch.no_grad():
        difference = (ours(x, positions) - theirs(x)).abs().max().item()
    if difference > 1e-5:
        raise SystemExit(f"sinks benchmark: outputs differ by {difference:.2e}")
    runs = {"blockspec": lambda v: ours(v, positions), "hf": theirs}
    return {"window": window, "max_abs_difference": difference, **timed_pair(runs, x, rounds)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024, help="tokens per batch (4 sequences)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--window", type=int, default=None, help="a sliding window too (gpt-oss: 128)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = measure(args.tokens, args.rounds, args.window)
    report = {"config": {**CONFIG, "tokens": args.tokens, "threads": args.threads, "rounds": args.rounds},
              "torch": torch.__version__, "results": [result]}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
