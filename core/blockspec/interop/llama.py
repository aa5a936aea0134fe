"""Llama family (LlamaForCausalLM, MistralForCausalLM) <-> blockspec weight names.

blockspec fuses q|k|v into one Linear (qkv) and gate|up into one (ffn.up, gate first, as
SwiGLU chunks it); Hugging Face keeps them separate. RoPE uses the "half" layout on both
sides, so q and k need no permutation.
"""

from __future__ import annotations

import re

from blockspec.spec.schema import ModelSpec
from blockspec.interop.weight_map import Rule, same, stacked

IGNORED = re.compile(r"\.rotary_emb\.inv_freq$")  # a buffer older transformers versions saved

LAYER_INDEX = r"^model\.layers\.(\d+)\."


def rules(spec: ModelSpec) -> list[Rule]:
    cfg = spec.model
    found = [same("embedding.weight", "model.embed_tokens.weight"), same("final_norm.weight", "model.norm.weight")]
    for i in range(cfg.n_layers):
        found += _block(spec, i)
    if not spec.head.config.tied:
        found.append(same("head.weight", "lm_head.weight"))
    return found


def _block(spec: ModelSpec, i: int) -> list[Rule]:
    cfg = spec.model
    ours, theirs = f"blocks.{i}", f"model.layers.{i}"
    kv_width = cfg.kv_heads * cfg.head_dim
    qkv_sizes = (cfg.d_model, kv_width, kv_width)
    suffixes = ("weight", "bias") if cfg.bias else ("weight",)
    found = [same(f"{ours}.norm1.weight", f"{theirs}.input_layernorm.weight"),
             same(f"{ours}.norm2.weight", f"{theirs}.post_attention_layernorm.weight")]
    for suffix in suffixes:
        attn = [f"{theirs}.self_attn.{p}_proj.{suffix}" for p in "qkv"]
        found += [
            stacked(f"{ours}.attn.qkv.{suffix}", attn, qkv_sizes),
            same(f"{ours}.attn.proj.{suffix}", f"{theirs}.self_attn.o_proj.{suffix}"),
            stacked(f"{ours}.ffn.up.{suffix}", [f"{theirs}.mlp.gate_proj.{suffix}", f"{theirs}.mlp.up_proj.{suffix}"],
                    (cfg.d_ff, cfg.d_ff)),
            same(f"{ours}.ffn.down.{suffix}", f"{theirs}.mlp.down_proj.{suffix}"),
        ]
    return found


def normalize_name(name: str) -> str:
    return name


def ignored(name: str, spec: ModelSpec) -> bool:
    return bool(IGNORED.search(name)) or (name == "lm_head.weight" and spec.head.config.tied)
