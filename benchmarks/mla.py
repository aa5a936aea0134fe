"""blockspec-attention's latent attention (mla) against Hugging Face's DeepseekV3Attention, same weights, CPU.

Checks the two compute the same function (max |difference| < 1e-5), then times forward and
forward + backward in interleaved rounds and reports median ratios blockspec / HF (target <= 1.0).
transformers runs its SDPA attention; both expand keys and values from the latent in the same way:

    python benchmarks/mla.py [--tokens T] [--rounds R] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
for plugin in ("attention", "positional"):  # importable from a checkout that has not pip-installed them
    sys.path.insert(0, str(ROOT / "plugins" / plugin))
sys.path.insert(0, str(ROOT))

from benchmarks.layer_pair import timed_pair  # noqa: E402

CONFIG = {"d_model": 256, "n_heads": 8, "rope_head_dim": 16, "nope_head_dim": 32, "v_head_dim": 32,
          "kv_lora_rank": 64, "q_lora_rank": 96}
HF_NAMES = {"q_proj": "q_proj", "q_down": "q_a_proj", "q_latent_norm": "q_a_layernorm", "q_up": "q_b_proj",
            "kv_down": "kv_a_proj_with_mqa", "kv_norm": "kv_a_layernorm", "kv_up": "kv_b_proj", "proj": "o_proj"}


def build_pair(seed: int = 0):
    """blockspec's LatentAttention and rope, and DeepSeek V3's attention and rotary embedding, same weights."""
    from blockspec_attention.mla import LatentAttention
    from blockspec_positional.rope import RotaryPositions
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding

    torch.manual_seed(seed)
    c = CONFIG
    ours = LatentAttention(d_model=c["d_model"], n_heads=c["n_heads"], rope_head_dim=c["rope_head_dim"],
                           nope_head_dim=c["nope_head_dim"], v_head_dim=c["v_head_dim"],
                           kv_lora_rank=c["kv_lora_rank"], q_lora_rank=c["q_lora_rank"], bias=False, dropout=0.0)
    config = DeepseekV3Config(hidden_size=c["d_model"], num_attention_heads=c["n_heads"],
                              num_key_value_heads=c["n_heads"], qk_rope_head_dim=c["rope_head_dim"],
                              qk_nope_head_dim=c["nope_head_dim"], v_head_dim=c["v_head_dim"],
                              kv_lora_rank=c["kv_lora_rank"], q_lora_rank=c["q_lora_rank"], num_hidden_layers=1,
                              attention_bias=False, rope_interleave=True)
    config._attn_implementation = "sdpa"
    hf = DeepseekV3Attention(config, layer_idx=0)
    with torch.no_grad():
        for name, parameter in ours.named_parameters():
            module, _, kind = name.rpartition(".")
            getattr(getattr(hf, HF_NAMES[module]), kind).copy_(parameter)
    rope = RotaryPositions(c["rope_head_dim"], 1 << 16, layout="interleaved")
    return ours, rope, hf, DeepseekV3RotaryEmbedding(config)


def hf_runner(hf, rotary, x: torch.Tensor):
    """DeepSeek V3's attention as its decoder layer calls it: cos/sin and the additive causal mask."""
    from blockspec.modules.attention import causal_mask

    n = x.shape[1]
    positions = torch.arange(n)[None].expand(x.shape[0], -1)
    mask = causal_mask(n, n, x.device, x.dtype)[None, None]  # (1, 1, N, N)
    return lambda inputs: hf(inputs, rotary(inputs, positions), mask)[0]


def measure(tokens: int, rounds: int) -> dict:
    ours, rope, hf, rotary = build_pair()
    x = torch.randn(4, tokens // 4, CONFIG["d_model"], generator=torch.Generator().manual_seed(1))
    theirs = hf_runner(hf, rotary, x)
    with torch.no_grad():
        difference = (ours(x, rope) - theirs(x)).abs().max().item()
    if difference > 1e-5:
        raise SystemExit(f"mla benchmark: outputs differ by {difference:.2e}")
    runs = {"blockspec": lambda v: ours(v, rope), "hf": theirs}
    return {"max_abs_difference": difference, **timed_pair(runs, x, rounds)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024, help="tokens per batch (4 sequences)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    report = {"config": {**CONFIG, "tokens": args.tokens, "threads": args.threads, "rounds": args.rounds},
              "torch": torch.__version__, "results": [measure(args.tokens, args.rounds)]}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
