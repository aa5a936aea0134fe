"""What the Llama-like families share (Llama, Mistral, Qwen2, Qwen3, StarCoder2, Phi-3, Mixtral): Hugging
Face's ``model.layers.i`` layer with separate q/k/v/o projections, two pre-norms and RoPE in the half layout.

``BASE`` is the config.json keys they have in common, each stated once (``interop.config_table``); a family
is ``BASE.but(...)`` its differences: head_dim, biases, qk-norm, sliding windows (every layer, or per layer
as Qwen's ``layer_types``). The key factories below are the variants several of them pick.

blockspec fuses q|k|v into one Linear (qkv) and a gated MLP's gate|up into one (ffn.up, gate first,
as SwiGLU chunks it); Hugging Face keeps them separate. RoPE uses the "half" layout on both sides,
so q and k need no permutation.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from blockspec.interop.config_reader import ConfigReader, rope, rope_json
from blockspec.interop.config_table import Document, Key, Read, Table, Write, mapped, norm_eps, put, tied
from blockspec.interop.family import biases, tied_head_copy, windows_of
from blockspec.interop.weight_map import Rule, same, stacked
from blockspec.modules.attention import qkv_split_sizes
from blockspec.spec.schema import ModelSpec

IGNORED = re.compile(r"\.rotary_emb\.inv_freq$")  # a buffer older transformers versions saved
LAYER_INDEX = r"^model\.layers\.(\d+)\."


# ---------------------------------------------------------------- the keys


def kv_heads(default: int | None = None) -> Key:
    """num_key_value_heads; absent: the config class's ``default`` (None: num_attention_heads, read before)."""
    def read(r: ConfigReader, document: Document, title: str) -> None:
        put(document, "model.n_kv_heads", r.get("num_key_value_heads", int, default or document["model"]["n_heads"]))

    return Key(name="num_key_value_heads", read=read,
               write=lambda spec: {"num_key_value_heads": spec.model.kv_heads})


def head_dim(default: int | None = None, *, always: bool = True, as_given: bool = False) -> Key:
    """head_dim: [model] head_dim when the config's differs from hidden_size / num_attention_heads, or
    (``as_given``: Gemma, OLMo 2) whenever it is set (Qwen3's and Gemma's ``default`` hold whatever the width;
    the others derive it when the key is absent). Written always, or (``always = False``, where the config
    class lacks the key but its attention reads one) only when given."""
    def read(r: ConfigReader, document: Document, title: str) -> None:
        model, found = document["model"], r.get("head_dim", int, default)
        sized = model["d_model"] and model["n_heads"]
        if found is not None and (as_given or sized and found * model["n_heads"] != model["d_model"]):
            model["head_dim"] = found

    def write(spec: ModelSpec) -> dict[str, Any]:
        given = spec.model.head_dim if always else spec.model.given_head_dim
        return {} if given is None else {"head_dim": given}

    return Key(name="head_dim", read=read, write=write, expresses={"head_dim": True})


def rms_norm_eps(default: float = 1e-6) -> Key:
    return norm_eps("rms_norm_eps", "rmsnorm", default)


def silu_gate(hint: str = "blockspec's swiglu gates with silu") -> Key:
    """The gated MLP's activation: act(gate_proj(x)) * up_proj(x) is SwiGLU for silu; another is refused."""
    def read(r: ConfigReader, document: Document, title: str) -> None:
        act = r.get("hidden_act", str, "silu")
        if act not in ("silu", "swish", None):
            r.problem("hidden_act", f"unsupported activation {act!r}", hint)
        document["activation"] = {"use": "swiglu"}

    return Key(name="hidden_act", read=read, write=lambda spec: {"hidden_act": "silu"},
               expresses={"activations": ("swiglu",)})


def full_rope(r: ConfigReader, title: str) -> dict[str, Any]:
    """The [positional] table: the family's rotary embedding turns every feature of a head."""
    return refuse_fraction(r, rope(r), title)


def refuse_fraction(r: ConfigReader, positional: dict[str, Any], title: str) -> dict[str, Any]:
    """``positional`` without its rotated fraction, which is refused: the family rotates every feature."""
    if "fraction" in positional:
        r.problem("partial_rotary_factor", f"partial RoPE (factor {positional.pop('fraction')}) is not supported",
                  f"the {title} family rotates every feature of a head; expected 1.0")
    return positional


def _rope_json(spec: ModelSpec) -> dict[str, Any]:
    return rope_json(spec.positional.config)


def rope_key(read: Read, write: Write = _rope_json, **expresses: Any) -> Key:
    """The rotary keys (rope_parameters, rope_scaling, rope_theta, partial_rotary_factor: one table to
    transformers), read by ``read`` and written by ``write`` (by default ``rope_json``)."""
    return Key(name="rope_parameters", read=read, write=write, expresses=expresses)


FULL_ROPE = rope_key(lambda r, document, title: document.update(positional=full_rope(r, title)))


def top_level_fraction(r: ConfigReader, used: float) -> None:
    """A top-level partial_rotary_factor (transformers 4's place) that rope(r) skipped for rope_parameters'
    (transformers 5's): refused unless the two agree."""
    top = r.get("partial_rotary_factor", float, None)
    if top is not None and top != used:
        r.problem("partial_rotary_factor", f"{top} differs from rope_parameters.partial_rotary_factor = {used}",
                  "transformers 5 reads rope_parameters, transformers 4 this: keep one")


def nullable(r: ConfigReader, key: str, kind: type, default: Any) -> Any:
    """A key whose explicit null switches a feature off (a window, a softcap): absent takes transformers'
    default, null is None (``ConfigReader.get`` reads null as absent)."""
    if key in r.config and r.config[key] is None:
        r.accept(key)
        return None
    return r.get(key, kind, default)


def sliding_window(default: int | None) -> Key:
    """sliding_window on every layer: null means full attention; an absent key is the config class's
    ``default`` (4096 for Mistral, none for StarCoder2, Phi-3 and Mixtral), which transformers then uses."""
    def read(r: ConfigReader, document: Document, title: str) -> None:
        window = nullable(r, "sliding_window", int, default)
        if window is not None:
            document["attention"]["sliding_window"] = window

    def write(spec: ModelSpec) -> dict[str, Any]:
        return {"sliding_window": windows_of(spec)[0] if spec.model.n_layers else None}

    return Key(name="sliding_window", read=read, write=write, expresses={"windows": "all"})


def _attention_bias(r: ConfigReader, document: Document, title: str) -> None:
    if r.get("attention_bias", bool, False):
        document["attention"].update(qkv_bias=True, out_bias=True)


def qk_norms(kind: str) -> Key:
    """q and k RMS-normalised (``kind``: "head" over each head, "all" over all heads' width) with the norms'
    eps, read before: no key of their own (Qwen3, OLMo 2)."""
    def read(r: ConfigReader, document: Document, title: str) -> None:
        document["attention"].update(qk_norm=kind, qk_norm_eps=document["norm"]["eps"])

    return Key(name="q_norm, k_norm", read=read, expresses={"qk_norm": kind})


# one attention_bias for q, k, v and o, and no MLP biases (Qwen3, Gemma, OLMo 2)
ATTENTION_BIAS_ONLY = Key(name="attention_bias", read=_attention_bias,
                          write=lambda spec: {"attention_bias": biases(spec)[0]},
                          expresses={"biases": "attention_bias_only"})

# The sizes as transformers' configs name them (GPT-NeoX's too), read first: the keys after them may look at them.
SIZES = (mapped("vocab_size", "model.vocab_size", int), mapped("hidden_size", "model.d_model", int),
         mapped("intermediate_size", "model.d_ff", int), mapped("num_hidden_layers", "model.n_layers", int),
         mapped("num_attention_heads", "model.n_heads", int),
         mapped("max_position_embeddings", "model.context_length", int))

# Every Llama-like config.json's keys, in reading order, for a bias-free pre-norm SwiGLU RMSNorm layer.
BASE = Table(
    keys=(*SIZES, kv_heads(), head_dim(), mapped("attention_dropout", "model.dropout", float, 0.0), FULL_ROPE,
          rms_norm_eps(), silu_gate(), tied()),
    frame={"model": {"norm_placement": "pre", "bias": False}, "attention": {"use": "causal"}, "head": {"use": "lm"}},
)


# ---------------------------------------------------------------- weights

SublayerRules = Callable[[ModelSpec, str, str], list[Rule]]  # (spec, ours, theirs) -> one sublayer's rules
Norms = tuple[tuple[str, str], ...]  # a block's norms, each with its Hugging Face name in the layer
PRE_NORMS: Norms = (("norm1", "input_layernorm"), ("norm2", "post_attention_layernorm"))


def rules(spec: ModelSpec, norms: Norms = PRE_NORMS, *, attention: SublayerRules | None = None,
          mlp: SublayerRules | None = None, mlp_name: str = "mlp") -> list[Rule]:
    """The whole weight map: embedding, each layer (``norms``, ``attention``, by default q/k/v/o apart, and
    ``mlp``, by default gate/up/down apart, which Hugging Face names ``mlp_name`` in the layer), final norm,
    untied head."""
    attention, mlp = attention or attention_rules, mlp or gated_mlp_rules
    found = [same("embedding.weight", "model.embed_tokens.weight"), *norm_rules(spec, "final_norm", "model.norm")]
    for i in range(spec.model.n_layers):
        ours, theirs = f"blocks.{i}", f"model.layers.{i}"
        for mine, hf in norms:
            found += norm_rules(spec, f"{ours}.{mine}", f"{theirs}.{hf}")
        found += attention(spec, f"{ours}.attn", f"{theirs}.self_attn")
        found += mlp(spec, f"{ours}.ffn", f"{theirs}.{mlp_name}")
    if not spec.head.config.tied:
        found.append(same("head.weight", "lm_head.weight"))
    return found


def norm_rules(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    """A norm's weight (and a LayerNorm's bias); none for a LayerNorm without either (OLMo's)."""
    if spec.norm.name == "layernorm" and not getattr(spec.norm.config, "elementwise_affine", True):
        return []
    found = [same(f"{ours}.weight", f"{theirs}.weight")]
    if spec.norm.name == "layernorm" and getattr(spec.norm.config, "bias", False):
        found.append(same(f"{ours}.bias", f"{theirs}.bias"))
    return found


def attention_rules(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    m = spec.model
    qkv_sizes = qkv_split_sizes(m.n_heads, m.kv_heads, m.head_dim)
    qkv_bias, out_bias, _ = biases(spec)
    found = [stacked(f"{ours}.qkv.weight", [f"{theirs}.{p}_proj.weight" for p in "qkv"], qkv_sizes),
             same(f"{ours}.proj.weight", f"{theirs}.o_proj.weight")]
    if qkv_bias:
        found.append(stacked(f"{ours}.qkv.bias", [f"{theirs}.{p}_proj.bias" for p in "qkv"], qkv_sizes))
    if out_bias:
        found.append(same(f"{ours}.proj.bias", f"{theirs}.o_proj.bias"))
    if getattr(spec.attention.config, "qk_norm", "none") != "none":
        found += [same(f"{ours}.{n}_norm.weight", f"{theirs}.{n}_norm.weight") for n in "qk"]
    return found


def gated_mlp_rules(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    """gate_proj, up_proj, down_proj: ffn.up = cat[gate, up], as SwiGLU chunks it."""
    d_ff, found = spec.model.d_ff, []
    for suffix in ("weight", "bias") if spec.model.bias else ("weight",):
        found += [stacked(f"{ours}.up.{suffix}", [f"{theirs}.gate_proj.{suffix}", f"{theirs}.up_proj.{suffix}"],
                          (d_ff, d_ff)),
                  same(f"{ours}.down.{suffix}", f"{theirs}.down_proj.{suffix}")]
    return found


def ignored(name: str, spec: ModelSpec) -> bool:
    return bool(IGNORED.search(name)) or tied_head_copy(name, spec)
