"""What the Llama-like families share (Llama, Mistral, Qwen2, Qwen3, StarCoder2): Hugging Face's
``model.layers.i`` layer with separate q/k/v/o projections, two pre-norms and RoPE in the half layout.

blockspec fuses q|k|v into one Linear (qkv) and a gated MLP's gate|up into one (ffn.up, gate first,
as SwiGLU chunks it); Hugging Face keeps them separate. RoPE uses the "half" layout on both sides,
so q and k need no permutation.

The families differ in what their config.json can say: head_dim, biases, qk-norm, sliding windows
(every layer, or per layer as Qwen's ``layer_types``). The readers and export checks for those
live here, each family picking the ones it has.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

import attrs

from blockspec.assembly.builtin import CausalAttentionConfig
from blockspec.interop.config_reader import ConfigReader, rope
from blockspec.interop.family import tied_head_copy
from blockspec.interop.weight_map import Rule, same, stacked
from blockspec.spec.schema import ModelSpec

IGNORED = re.compile(r"\.rotary_emb\.inv_freq$")  # a buffer older transformers versions saved
LAYER_INDEX = r"^model\.layers\.(\d+)\."
Windows = list[int | None]  # each layer's sliding window, None: full causal attention
WindowPolicy = Literal["none", "all", "per_layer"]  # which windows a family's config.json can express


# ---------------------------------------------------------------- config.json -> spec


def sizes(r: ConfigReader, name: str) -> dict[str, Any]:
    """The [model] sizes every Llama-like config.json gives under the same keys."""
    n_heads = r.get("num_attention_heads", int)
    return {
        "name": name, "vocab_size": r.get("vocab_size", int), "d_model": r.get("hidden_size", int),
        "context_length": r.get("max_position_embeddings", int), "n_layers": r.get("num_hidden_layers", int),
        "n_heads": n_heads, "n_kv_heads": r.get("num_key_value_heads", int, n_heads),
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
    positional = rope(r)
    if "fraction" in positional:
        r.problem("partial_rotary_factor", f"partial RoPE (factor {positional.pop('fraction')}) is not supported",
                  f"the {title} family rotates every feature; expected 1.0")
    return positional


def window_key(r: ConfigReader, default: int | None) -> int | None:
    """sliding_window: null means full attention; an absent key is the config class's default (4096 for
    Mistral and Qwen, none for StarCoder2), which transformers then uses."""
    if "sliding_window" in r.config and r.config["sliding_window"] is None:
        r.accept("sliding_window")
        return None
    return r.get("sliding_window", int, default)


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


def windows_of(spec: ModelSpec) -> Windows:
    return [getattr(spec.layer(i).attention.config, "sliding_window", None) for i in range(spec.model.n_layers)]


def qwen_windows_json(spec: ModelSpec) -> dict[str, Any]:
    """Qwen's window keys: layer_types for newer transformers, max_window_layers (the first sliding layer)
    for older ones, which slide every layer from there on."""
    windows = windows_of(spec)
    sliding = [i for i, w in enumerate(windows) if w is not None]
    return {"use_sliding_window": bool(sliding), "sliding_window": windows[sliding[0]] if sliding else None,
            "max_window_layers": sliding[0] if sliding else spec.model.n_layers,
            "layer_types": ["sliding_attention" if w is not None else "full_attention" for w in windows]}


def biases(spec: ModelSpec) -> tuple[bool, bool, bool]:
    """Whether the qkv projections, the output projection and the MLP have biases."""
    m, config = spec.model, spec.attention.config
    qkv, out = getattr(config, "qkv_bias", None), getattr(config, "out_bias", None)
    return (m.bias if qkv is None else qkv, m.bias if out is None else out, m.bias)


def bias_misfit(spec: ModelSpec, fits: Callable[[bool, bool, bool], bool], has: str) -> list[str]:
    qkv, out, ffn = biases(spec)
    if fits(qkv, out, ffn):
        return []
    return [f"biases qkv = {str(qkv).lower()}, out = {str(out).lower()}, ffn = {str(ffn).lower()} ([model] bias, "
            f"[attention] qkv_bias, out_bias): the family has {has}"]


def layout_misfits(spec: ModelSpec, *, windows: WindowPolicy, head_dim: bool = True,
                   qk_norm: Literal["none", "head"] = "none") -> list[str]:
    """What keeps a spec from the Llama-like layout, beyond the norm, activation and biases each family
    checks itself (a variant of ``family.common_misfits`` that lets a family express head_dim, sliding
    windows and qk-norm)."""
    problems = structure_misfits(spec) + layer_misfits(spec, windows)
    if spec.positional.name != "rope":
        problems.append(f"positional is {spec.positional.name!r}, expected 'rope'")
    return problems + option_misfits(spec, head_dim=head_dim, qk_norm=qk_norm)


def structure_misfits(spec: ModelSpec) -> list[str]:
    """An LM head, causal attention, pre-norm blocks with a final norm and a dense FFN."""
    m, problems = spec.model, []
    if spec.head.name != "lm":
        problems.append(f"head is {spec.head.name!r}, expected 'lm'")
    if spec.attention.name != "causal":
        problems.append(f"attention is {spec.attention.name!r}, expected 'causal'")
    if m.norm_placement != "pre" or not m.has_final_norm:
        problems.append("expected pre-norm blocks with a final norm")
    if spec.block.name != "pre" or spec.block.distribution not in (None, "blockspec-blocks"):
        problems.append(f"block is {spec.block.use!r}, expected 'pre': the family's layers are pre-norm "
                        "x + attn(norm1(x)), x + ffn(norm2(x))")
    if spec.ffn.name != "dense" or spec.ffn.distribution not in (None, "blockspec"):
        problems.append(f"ffn is {spec.ffn.use!r}, expected 'dense': the family's MLP is up, activation, down")
    return problems


def layer_misfits(spec: ModelSpec, windows: WindowPolicy) -> list[str]:
    """Layers may differ only in their attention's window, and only as the family's config.json can say."""
    if any(_differs_beyond_window(spec, i) for i in range(spec.model.n_layers)):
        return ["the layers differ ([[layers]]) beyond their attention's sliding_window: the family configures "
                "every layer alike"]
    found = windows_of(spec)
    widths = {w for w in found if w is not None}
    if windows == "none" and widths:
        return [f"[attention] sliding_window = {min(widths)}: the family has full causal attention only"]
    if len(widths) > 1:
        return [f"sliding windows of {len(widths)} widths: the family has one sliding_window"]
    if windows == "all" and widths and None in found:
        return ["some layers slide, some do not ([[layers]]): the family's sliding_window applies to every layer"]
    return []


def _differs_beyond_window(spec: ModelSpec, i: int) -> bool:
    layer = spec.layer(i)
    if (layer.block, layer.ffn, layer.norm, layer.activation, layer.positional) != (
            spec.block, spec.ffn, spec.norm, spec.activation, spec.positional):
        return True
    ours, base = layer.attention, spec.attention
    if ours.use != base.use or not isinstance(ours.config, CausalAttentionConfig):
        return ours != base
    return attrs.evolve(ours.config, sliding_window=None) != attrs.evolve(base.config, sliding_window=None)


def option_misfits(spec: ModelSpec, *, head_dim: bool, qk_norm: str) -> list[str]:
    """The model, attention, norm, positional and head options the Llama-like families lack."""
    m, problems = spec.model, []
    if not head_dim and m.given_head_dim is not None and m.given_head_dim != m.d_model // m.n_heads:
        problems.append(f"[model] head_dim = {m.given_head_dim}: the family's head_dim is d_model / n_heads")
    if m.embedding_scale is not None:
        problems.append("[model] embedding_scale: the family does not scale the embeddings")
    attention = spec.attention.config
    if isinstance(attention, CausalAttentionConfig):
        problems += _attention_misfits(attention, qk_norm)
    if getattr(spec.norm.config, "offset", False):
        problems.append("[norm] offset = true: the family's RMSNorm scales by w, not 1 + w")
    if getattr(spec.positional.config, "fraction", 1.0) != 1.0:
        problems.append(f"[positional] fraction = {spec.positional.config.fraction}: the family rotates every "
                        "feature of a head")
    if getattr(spec.head.config, "logit_softcap", None) is not None:
        problems.append("[head] logit_softcap: the family's logits are not capped")
    return problems


def _attention_misfits(attention: CausalAttentionConfig, qk_norm: str) -> list[str]:
    problems = []
    if attention.qk_norm != qk_norm:
        has = "no q/k norm" if qk_norm == "none" else f"qk_norm = {qk_norm!r} on every layer"
        problems.append(f"[attention] qk_norm = {attention.qk_norm!r}: the family has {has}")
    if attention.logit_softcap is not None:
        problems.append(f"[attention] logit_softcap = {attention.logit_softcap}: the family has no attention "
                        "logit softcap")
    if attention.query_scale is not None:
        problems.append(f"[attention] query_scale = {attention.query_scale}: the family scales scores by "
                        "1/sqrt(head_dim)")
    return problems


def norm_misfits(spec: ModelSpec, name: str) -> list[str]:
    if spec.norm.name != name:
        return [f"norm is {spec.norm.name!r}, expected {name!r}"]
    if name == "layernorm" and not (spec.norm.config.elementwise_affine and spec.norm.config.bias):
        return ["expected norm 'layernorm' with weight and bias"]
    return []


# ---------------------------------------------------------------- weights

MlpRules = Callable[[ModelSpec, str, str], list[Rule]]  # (spec, ours, theirs) -> one layer's MLP rules


def rules(spec: ModelSpec, mlp: MlpRules) -> list[Rule]:
    """The whole weight map: embedding, each layer (norms, attention, ``mlp``), final norm, untied head."""
    found = [same("embedding.weight", "model.embed_tokens.weight"), *norm_rules(spec, "final_norm", "model.norm")]
    for i in range(spec.model.n_layers):
        ours, theirs = f"blocks.{i}", f"model.layers.{i}"
        found += norm_rules(spec, f"{ours}.norm1", f"{theirs}.input_layernorm")
        found += norm_rules(spec, f"{ours}.norm2", f"{theirs}.post_attention_layernorm")
        found += attention_rules(spec, f"{ours}.attn", f"{theirs}.self_attn") + mlp(spec, f"{ours}.ffn", f"{theirs}.mlp")
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
    kv_width = m.kv_heads * m.head_dim
    qkv_sizes = (m.n_heads * m.head_dim, kv_width, kv_width)
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
