"""GPT-2 (GPT2LMHeadModel) <-> blockspec weight names.

Hugging Face keeps GPT-2's original Conv1D layers, whose weights are stored (in, out): the
transpose of a Linear. c_attn is already one fused (d, 3d) q|k|v matrix, as blockspec's qkv.
"""

from __future__ import annotations

import re

from blockspec.spec.schema import ModelSpec
from blockspec.interop.weight_map import Rule, same

PREFIX = "transformer."
IGNORED = re.compile(r"(^|\.)h\.\d+\.attn\.(masked_)?bias$")  # causal-mask buffers of old checkpoints

LAYER_INDEX = r"^transformer\.h\.(\d+)\."


def rules(spec: ModelSpec) -> list[Rule]:
    cfg = spec.model
    found = [
        same("embedding.weight", "transformer.wte.weight"),
        same("positional.table.weight", "transformer.wpe.weight"),
        same("final_norm.weight", "transformer.ln_f.weight"),
        same("final_norm.bias", "transformer.ln_f.bias"),
    ]
    for i in range(cfg.n_layers):
        found += _block(i)
    if not spec.head.config.tied:
        found.append(same("head.weight", "lm_head.weight"))
    return found


def _block(i: int) -> list[Rule]:
    ours, theirs = f"blocks.{i}", f"transformer.h.{i}"
    conv1d = [("attn.qkv", "attn.c_attn"), ("attn.proj", "attn.c_proj"), ("ffn.up", "mlp.c_fc"),
              ("ffn.down", "mlp.c_proj")]
    norms = [("norm1", "ln_1"), ("norm2", "ln_2")]
    found = []
    for mine, hf in conv1d:
        found.append(same(f"{ours}.{mine}.weight", f"{theirs}.{hf}.weight", transpose=True))
        found.append(same(f"{ours}.{mine}.bias", f"{theirs}.{hf}.bias"))
    for mine, hf in norms:
        found += [same(f"{ours}.{mine}.weight", f"{theirs}.{hf}.weight"),
                  same(f"{ours}.{mine}.bias", f"{theirs}.{hf}.bias")]
    return found


def normalize_name(name: str) -> str:
    """Checkpoints saved from GPT2Model (like the original 'gpt2') lack the 'transformer.' prefix."""
    if name.startswith(PREFIX) or name.startswith("lm_head."):
        return name
    return PREFIX + name


def ignored(name: str, spec: ModelSpec) -> bool:
    """Buffers transformers itself ignores, and a tied model's redundant lm_head copy."""
    return bool(IGNORED.search(name)) or (name == "lm_head.weight" and spec.head.config.tied)
