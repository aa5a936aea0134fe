"""GPT-2 (GPT2LMHeadModel): its config.json keys (one table, ``TABLE``) and weight names.

Hugging Face keeps GPT-2's original Conv1D layers, whose weights are stored (in, out): the
transpose of a Linear. c_attn is already one fused (d, 3d) q|k|v matrix, as blockspec's qkv.
"""

from __future__ import annotations

import re
from typing import Any

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.config_table import (Document, Key, Table, accepted, fixed, folded_dropout, mapped, norm_eps,
                                            table_family, tied)
from blockspec.interop.family import tied_head_copy
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


# ---------------------------------------------------------------- the table


def activation_key(name: str, default: str, tanh_name: str = "gelu_new") -> Key:
    """The activation of a non-gated MLP from ACTIVATIONS (GPT-2's activation_function, GPT-NeoX's and
    StarCoder2's hidden_act), written back as ``tanh_name`` for the tanh GELU."""
    def read(r: ConfigReader, document: Document, title: str) -> None:
        act = r.get(name, str, default)
        if act not in ACTIVATIONS and act is not None:
            r.problem(name, f"unsupported activation {act!r}", f"supported: {', '.join(ACTIVATIONS)}")
        document["activation"] = dict(ACTIVATIONS.get(act, ACTIVATIONS[default]))

    def write(spec: ModelSpec) -> dict[str, Any]:
        act = spec.activation
        tanh = getattr(act.config, "approximate", "none") == "tanh"
        return {name: act.name if act.name != "gelu" else tanh_name if tanh else "gelu"}

    return Key(name=name, read=read, write=write, expresses={"activations": ("gelu", "relu", "silu")})


def _d_ff(r: ConfigReader, document: Document, title: str) -> None:
    """n_inner; absent: 4 · n_embd, as GPT2MLP builds it."""
    d_ff = r.get("n_inner", int, None)
    document["model"]["d_ff"] = d_ff if d_ff is not None else 4 * (document["model"]["d_model"] or 0)


TABLE = Table(
    keys=(mapped("n_embd", "model.d_model", int, aliases=("hidden_size",)),
          activation_key("activation_function", "gelu_new"),
          # the sequence-summary head of GPT2DoubleHeadsModel, never built for GPT2LMHeadModel
          accepted("summary_activation"), accepted("summary_first_dropout"), accepted("summary_proj_to_labels"),
          accepted("summary_type"), accepted("summary_use_proj"),
          # embedding and attention dropout, which blockspec folds into one rate (resid_pdrop): neither changes an
          # eval-mode forward; reorder_and_upcast_attn changes only how float16 scores are rounded
          folded_dropout("embd_pdrop"), folded_dropout("attn_pdrop"), accepted("reorder_and_upcast_attn"),
          fixed("scale_attn_weights", True, "unscaled attention scores are not supported"),
          fixed("scale_attn_by_inverse_layer_idx", False, "per-layer score scaling is not supported"),
          fixed("add_cross_attention", False, "cross-attention is not supported"),
          Key(name="n_inner", read=_d_ff, write=lambda spec: {"n_inner": spec.model.d_ff}),
          mapped("vocab_size", "model.vocab_size", int),
          mapped("n_positions", "model.context_length", int, aliases=("n_ctx", "max_position_embeddings"),
                 written_too=("n_ctx",)),
          mapped("n_layer", "model.n_layers", int, aliases=("num_hidden_layers",)),
          mapped("n_head", "model.n_heads", int, aliases=("num_attention_heads",)),
          mapped("resid_pdrop", "model.dropout", float, 0.1),  # transformers' default
          norm_eps("layer_norm_epsilon", "layernorm", 1e-5), tied(True)),
    frame={"model": {"bias": True, "norm_placement": "pre"}, "positional": {"use": "learned"},
           "attention": {"use": "causal"}, "head": {"use": "lm"}},
    has={"positional": "learned", "biases": "all", "grouped_kv": False},
)


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


FAMILY = table_family(name="gpt2", title="GPT-2", architecture=ARCHITECTURE, model_type="gpt2", table=TABLE,
                      rules=rules, layer_index=LAYER_INDEX, ignored=ignored, normalize_name=normalize_name)
