"""What the Gemma, Gemma 2 and OLMo 2 families share.

All three keep Llama's weight names for attention (q, k, v, o apart; blockspec fuses q|k|v) and
for the gated MLP (gate, up apart; blockspec's ffn.up is gate|up, gate first), with an MLP that
never has biases while attention has them when ``attention_bias``: blockspec's [model] bias is
false and [attention] qkv_bias/out_bias carry ``attention_bias``. They differ in where the norms
sit (the block), the norms' (1 + w) offset, the embedding scale and the attention options, which
each family states for export with ``interop.family.Expresses``. The config.json readers are the
Llama-like ones (``llama_like``) where the keys are the same.
"""

from __future__ import annotations

from typing import Any

from blockspec.interop.config_reader import ConfigReader, rope_json
from blockspec.interop.families import llama_like
from blockspec.interop.family import biases
from blockspec.spec.schema import ModelSpec


# ---------------------------------------------------------------- config.json -> spec


def model_table(r: ConfigReader, name: str, *, head_dim: int | None, kv_heads: int | None) -> dict[str, Any]:
    """The [model] table; ``head_dim`` and ``kv_heads`` are transformers' defaults for an absent key
    (None: derived from the other sizes, as blockspec does)."""
    given_head_dim = r.get("head_dim", int, head_dim)
    model = {**llama_like.sizes(r, name, kv_heads), "bias": False, "dropout": r.get("attention_dropout", float, 0.0)}
    if given_head_dim is not None:
        model["head_dim"] = given_head_dim
    return model


def attention_table(r: ConfigReader, **options: Any) -> dict[str, Any]:
    """[attention]: causal, with ``attention_bias`` on q, k, v and o (never on the MLP) and ``options``."""
    table: dict[str, Any] = {"use": "causal", **options}
    if r.get("attention_bias", bool, False):
        table.update(qkv_bias=True, out_bias=True)
    return table


def refuse_bidirectional(r: ConfigReader) -> None:
    if r.get("use_bidirectional_attention", bool, False):
        r.problem("use_bidirectional_attention", "bidirectional attention is not supported",
                  "blockspec's language models attend causally; expected false or null")


# ---------------------------------------------------------------- spec -> config.json


def config_keys(spec: ModelSpec) -> dict[str, Any]:
    """The config.json keys every one of these families writes alike."""
    return {
        **llama_like.size_keys(spec), "head_dim": spec.model.head_dim, "rms_norm_eps": spec.norm.config.eps,
        **rope_json(spec.positional.config), "attention_bias": biases(spec)[0], "attention_dropout": spec.model.dropout,
    }
