"""GPT-2 (GPT2LMHeadModel): config.json keys, export checks and weight names.

Hugging Face keeps GPT-2's original Conv1D layers, whose weights are stored (in, out): the
transpose of a Linear. c_attn is already one fused (d, 3d) q|k|v matrix, as blockspec's qkv.
"""

from __future__ import annotations

import re
from typing import Any

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.family import Expresses, Family, tied_head_copy
from blockspec.interop.weight_map import Rule, same

ARCHITECTURE = "GPT2LMHeadModel"
PREFIX = "transformer."
IGNORED = re.compile(r"(^|\.)h\.\d+\.attn\.(masked_)?bias$")  # causal-mask buffers of old checkpoints
LAYER_INDEX = r"^transformer\.h\.(\d+)\."
ACTIVATIONS = {  # activation_function -> blockspec activation table
    "gelu_new": {"use": "gelu", "approximate": "tanh"},
    "gelu_pytorch_tanh": {"use": "gelu", "approximate": "tanh"},
    "gelu_fast": {"use": "gelu", "approximate": "tanh"},
    "gelu": {"use": "gelu", "approximate": "none"},
    "relu": {"use": "relu"},
    "silu": {"use": "silu"},
    "swish": {"use": "silu"},
}


# ---------------------------------------------------------------- config.json -> spec


def spec_dict(r: ConfigReader, name: str) -> dict[str, Any]:
    d_model = r.get("n_embd", int, aliases=("hidden_size",))
    activation = r.get("activation_function", str, "gelu_new")
    if activation not in ACTIVATIONS and activation is not None:
        r.problem("activation_function", f"unsupported activation {activation!r}",
                  f"supported: {', '.join(ACTIVATIONS)}")
    _refusals(r)
    d_ff = r.get("n_inner", int, None)
    model = {
        "name": name, "vocab_size": r.get("vocab_size", int), "d_model": d_model,
        "context_length": r.get("n_positions", int, aliases=("n_ctx", "max_position_embeddings")),
        "n_layers": r.get("n_layer", int, aliases=("num_hidden_layers",)),
        "n_heads": r.get("n_head", int, aliases=("num_attention_heads",)),
        "d_ff": d_ff if d_ff is not None else 4 * (d_model or 0), "bias": True, "norm_placement": "pre",
        "dropout": r.get("resid_pdrop", float, 0.1),  # transformers' default
    }
    return {
        "model": model, "positional": {"use": "learned"},
        "norm": {"use": "layernorm", "eps": r.get("layer_norm_epsilon", float, 1e-5)},
        "activation": dict(ACTIVATIONS.get(activation, {"use": "gelu"})),
        "head": {"use": "lm", "tied": r.get("tie_word_embeddings", bool, True)},
        "attention": {"use": "causal"},
    }


def _refusals(r: ConfigReader) -> None:
    # the sequence-summary head of GPT2DoubleHeadsModel, never built for GPT2LMHeadModel; embedding and attention
    # dropout, which blockspec folds into one rate (resid_pdrop): neither changes an eval-mode forward;
    # reorder_and_upcast_attn changes only how float16 scores are rounded
    r.accept("summary_activation", "summary_first_dropout", "summary_proj_to_labels", "summary_type",
             "summary_use_proj", "embd_pdrop", "attn_pdrop", "reorder_and_upcast_attn")
    if r.get("scale_attn_weights", bool, True) is False:
        r.problem("scale_attn_weights", "unscaled attention scores are not supported", "expected true")
    if r.get("scale_attn_by_inverse_layer_idx", bool, False):
        r.problem("scale_attn_by_inverse_layer_idx", "per-layer score scaling is not supported", "expected false")
    if r.get("add_cross_attention", bool, False):
        r.problem("add_cross_attention", "cross-attention is not supported", "expected false")


# ---------------------------------------------------------------- spec -> config.json


EXPRESSES = Expresses(positional="learned", norm="layernorm", activations=("gelu", "relu", "silu"), biases="all",
                      grouped_kv=False)


def config_json(spec: ModelSpec) -> dict[str, Any]:
    m, act = spec.model, spec.activation
    function = {"relu": "relu", "silu": "silu"}.get(act.name) or (
        "gelu_new" if getattr(act.config, "approximate", "none") == "tanh" else "gelu")
    return {
        "architectures": [ARCHITECTURE], "model_type": "gpt2", "vocab_size": m.vocab_size,
        "n_positions": m.context_length, "n_ctx": m.context_length, "n_embd": m.d_model, "n_layer": m.n_layers,
        "n_head": m.n_heads, "n_inner": m.d_ff, "activation_function": function,
        "layer_norm_epsilon": spec.norm.config.eps, "resid_pdrop": m.dropout, "embd_pdrop": m.dropout,
        "attn_pdrop": m.dropout, "tie_word_embeddings": spec.head.config.tied, "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "add_cross_attention": False,
    }


# ---------------------------------------------------------------- weights


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
    return bool(IGNORED.search(name)) or tied_head_copy(name, spec)


FAMILY = Family(
    name="gpt2", title="GPT-2", architectures={ARCHITECTURE: "gpt2"}, spec_dict=spec_dict,
    misfits=EXPRESSES.misfits, config_json=config_json, rules=rules, layer_index=LAYER_INDEX,
    normalize_name=normalize_name, ignored=ignored,
)
