"""What the Llama-like families share (Llama, Mistral, Qwen2, Qwen3, StarCoder2): Hugging Face's
``model.layers.i`` layer with separate q/k/v/o projections, two pre-norms and RoPE in the half layout.

blockspec fuses q|k|v into one Linear (qkv) and a gated MLP's gate|up into one (ffn.up, gate first,
as SwiGLU chunks it); Hugging Face keeps them separate. RoPE uses the "half" layout on both sides,
so q and k need no permutation.

The families differ in what their config.json can say: head_dim, biases, qk-norm, sliding windows
(every layer, or per layer as Qwen's ``layer_types``). The readers and writers of those keys live
here, each family picking the ones it has (Phi-3 and Mixtral too); each states what it can express
for the export checks with ``interop.family.Expresses``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from blockspec.interop.config_reader import ConfigReader, rope
from blockspec.interop.family import biases, tied_head_copy, windows_of
from blockspec.interop.weight_map import Rule, same, stacked
from blockspec.modules.attention import qkv_split_sizes
from blockspec.spec.schema import ModelSpec

IGNORED = re.compile(r"\.rotary_emb\.inv_freq$")  # a buffer older transformers versions saved
LAYER_INDEX = r"^model\.layers\.(\d+)\."
Windows = list[int | None]  # each layer's sliding window, None: full causal attention


# ---------------------------------------------------------------- config.json -> spec


def sizes(r: ConfigReader, name: str, kv_heads: int | None = None) -> dict[str, Any]:
    """The [model] sizes every Llama-like config.json gives under the same keys; ``kv_heads`` is the config
    class's num_key_value_heads when the key is absent (None: num_attention_heads)."""
    n_heads = r.get("num_attention_heads", int)
    return {
        "name": name, "vocab_size": r.get("vocab_size", int), "d_model": r.get("hidden_size", int),
        "context_length": r.get("max_position_embeddings", int), "n_layers": r.get("num_hidden_layers", int),
        "n_heads": n_heads, "n_kv_heads": r.get("num_key_value_heads", int, kv_heads or n_heads),
        "d_ff": r.get("intermediate_size", int), "norm_placement": "pre",
    }


def read_head_dim(r: ConfigReader, model: dict[str, Any], default: int | None = None) -> None:
    """[model] head_dim when the config's differs from hidden_size / num_attention_heads (Qwen3's
    default is 128 whatever the width; the others derive it when the key is absent)."""
    head_dim = r.get("head_dim", int, default)
    d_model, n_heads = model["d_model"], model["n_heads"]
    if head_dim is not None and d_model and n_heads and head_dim * n_heads != d_model:
        model["head_dim"] = head_dim


def silu_gate(r: ConfigReader) -> dict[str, Any]:
    """The gated MLP's activation table: act(gate_proj(x)) * up_proj(x) is SwiGLU for silu."""
    act = r.get("hidden_act", str, "silu")
    if act not in ("silu", "swish", None):
        r.problem("hidden_act", f"unsupported activation {act!r}", "blockspec's swiglu gates with silu")
    return {"use": "swiglu"}


def full_rope(r: ConfigReader, title: str) -> dict[str, Any]:
    """The [positional] table: the family's rotary embedding turns every feature of a head."""
    return refuse_fraction(r, rope(r), title)


def refuse_fraction(r: ConfigReader, positional: dict[str, Any], title: str) -> dict[str, Any]:
    """``positional`` without its rotated fraction, which is refused: the family rotates every feature."""
    if "fraction" in positional:
        r.problem("partial_rotary_factor", f"partial RoPE (factor {positional.pop('fraction')}) is not supported",
                  f"the {title} family rotates every feature of a head; expected 1.0")
    return positional


def top_level_fraction(r: ConfigReader, used: float) -> None:
    """A top-level partial_rotary_factor (transformers 4's place) that rope(r) skipped for rope_parameters'
    (transformers 5's): refused unless the two agree."""
    top = r.get("partial_rotary_factor", float, None)
    if top is not None and top != used:
        r.problem("partial_rotary_factor", f"{top} differs from rope_parameters.partial_rotary_factor = {used}",
                  "transformers 5 reads rope_parameters, transformers 4 this: keep one")


def window_key(r: ConfigReader, default: int | None) -> int | None:
    """sliding_window: null means full attention; an absent key is the config class's default (4096 for
    Mistral and Qwen, none for StarCoder2), which transformers then uses."""
    return nullable(r, "sliding_window", int, default)


def nullable(r: ConfigReader, key: str, kind: type, default: Any) -> Any:
    """A key whose explicit null switches a feature off (a window, a softcap): absent takes transformers'
    default, null is None (``ConfigReader.get`` reads null as absent)."""
    if key in r.config and r.config[key] is None:
        r.accept(key)
        return None
    return r.get(key, kind, default)


def window_attention(window: int | None) -> dict[str, Any]:
    """The [attention] table of a family whose every layer has the same window (None: full attention)."""
    return {"use": "causal"} if window is None else {"use": "causal", "sliding_window": window}


def qwen_windows(r: ConfigReader, n_layers: int | None) -> Windows:
    """Each layer's window as Qwen2Config and Qwen3Config decide it: sliding_window when
    use_sliding_window, on the layers ``layer_types`` says slide (newer transformers), else on layers
    max_window_layers and above (what older ones did, and what newer ones derive layer_types from)."""
    window = window_key(r, 4096)
    window = window if r.get("use_sliding_window", bool, False) else None
    first, n = r.get("max_window_layers", int, 28), n_layers or 0
    types = r.get("layer_types", list, None)
    if types is None:
        return [window if window is not None and i >= first else None for i in range(n)]
    return _typed_windows(r, types, window, n)


LAYER_TYPES = {"full_attention": False, "attention": False, "sliding_attention": True}  # "attention": older name


def _typed_windows(r: ConfigReader, types: list[Any], window: int | None, n_layers: int) -> Windows:
    unknown = [t for t in types if t not in LAYER_TYPES]
    if unknown:
        r.problem("layer_types", f"unsupported layer type {unknown[0]!r:.40}", "expected full_attention or "
                  "sliding_attention")
    elif len(types) != n_layers:
        r.problem("layer_types", f"{len(types)} entries for num_hidden_layers = {n_layers}")
    elif window is None and "sliding_attention" in types:
        r.problem("layer_types", "sliding_attention layers without a window", "transformers cannot build it: "
                  "use_sliding_window is false or sliding_window null")
    else:
        return [window if LAYER_TYPES[t] else None for t in types]
    return [None] * n_layers


def windowed(attention: dict[str, Any], windows: Windows) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The [attention] table and [[layers]] rules for per-layer windows (one width, as transformers has):
    in [attention] when every layer slides, else a rule adding the window to the sliding layers."""
    sliding = [i for i, w in enumerate(windows) if w is not None]
    if not sliding:
        return attention, []
    if len(sliding) == len(windows):
        return {**attention, "sliding_window": windows[0]}, []
    return attention, [{**_selector(sliding, len(windows)), "attention": {"sliding_window": windows[sliding[0]]}}]


def _selector(layers: list[int], n_layers: int) -> dict[str, Any]:
    """from/to for a run of layers (max_window_layers gives the top ones), else their index list."""
    if layers != list(range(layers[0], layers[-1] + 1)):
        return {"index": layers}
    return {"from": layers[0]} if layers[-1] == n_layers - 1 else {"from": layers[0], "to": layers[-1]}


def document(model: dict[str, Any], *, positional: dict[str, Any], norm: dict[str, Any],
             activation: dict[str, Any], tied: bool, attention: dict[str, Any],
             layers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The spec dict, with [[layers]] only when the layers differ."""
    found = {"model": model, "positional": positional, "norm": norm, "activation": activation,
             "head": {"use": "lm", "tied": tied}, "attention": attention}
    return {**found, "layers": layers} if layers else found


# ---------------------------------------------------------------- spec -> config.json


def size_keys(spec: ModelSpec) -> dict[str, Any]:
    """The config.json keys ``sizes`` reads, and the tying, as every Llama-like family writes them."""
    m = spec.model
    return {
        "vocab_size": m.vocab_size, "hidden_size": m.d_model, "intermediate_size": m.d_ff,
        "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads, "num_key_value_heads": m.kv_heads,
        "max_position_embeddings": m.context_length, "tie_word_embeddings": spec.head.config.tied,
    }


def given_head_dim(spec: ModelSpec) -> dict[str, Any]:
    """head_dim, written only when the spec gives one (a key the family's config class lacks, but its
    attention reads when given)."""
    given = spec.model.given_head_dim
    return {} if given is None else {"head_dim": given}


def window_json(spec: ModelSpec) -> dict[str, Any]:
    """sliding_window of a family whose every layer has the same window (None: full attention)."""
    return {"sliding_window": windows_of(spec)[0] if spec.model.n_layers else None}


def qwen_windows_json(spec: ModelSpec) -> dict[str, Any]:
    """Qwen's window keys: layer_types for newer transformers, max_window_layers (the first sliding layer)
    for older ones, which slide every layer from there on."""
    windows = windows_of(spec)
    sliding = [i for i, w in enumerate(windows) if w is not None]
    return {"use_sliding_window": bool(sliding), "sliding_window": windows[sliding[0]] if sliding else None,
            "max_window_layers": sliding[0] if sliding else spec.model.n_layers,
            "layer_types": ["sliding_attention" if w is not None else "full_attention" for w in windows]}


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
