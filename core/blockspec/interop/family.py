"""The Family protocol: everything blockspec knows about one Hugging Face model family.

Each family is one module under ``interop/families/`` that builds one ``Family`` (named
``FAMILY``); ``interop.families.FAMILIES`` lists them, and nothing outside that module
knows the family's config keys, architecture names or weight names:

- ``architectures``: the Hugging Face class names it imports, each with its ``model_type``
  (the first is what an export writes);
- ``spec_dict(reader, name)``: config.json -> a blockspec spec dict, reading every key
  through the ``ConfigReader`` and refusing, with ``reader.problem`` at that key and a
  reason, each one the blockspec model would compute differently;
- ``misfits(spec)``: why a spec cannot be exported as this family (empty: it can):
  ``Expresses(...).misfits`` below, given what the family's config.json can say;
- ``config_json(spec)``: spec -> the architecture keys of config.json.

The three come from one table of the family's config keys (``interop.config_table``:
``table_family``), each key stated once for reading, writing and what it lets the family express;
- ``rules(spec)``: the weight map (``interop.weight_map.Rule``), used both ways;
- ``layer_index``: a regex whose group 1 is the layer number of a per-layer tensor name;
- ``normalize_name(name)``: a stored tensor name -> the canonical name the rules use;
- ``ignored(name, spec)``: tensors transformers ignores too (buffers, a tied head's copy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Literal

from attrs import evolve, field, frozen

from blockspec.assembly.builtin import CausalAttentionConfig
from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.weight_map import Rule
from blockspec.spec.schema import ComponentSpec, LayerSpec, ModelSpec


def same_name(name: str) -> str:
    return name


def tied_head_copy(name: str, spec: ModelSpec) -> bool:
    """A tied model's redundant ``lm_head.weight`` (the embedding is the head)."""
    return name == "lm_head.weight" and spec.head.config.tied


WindowPolicy = Literal["none", "all", "per_layer"]  # no window, one on every layer, one width on the layers named
BiasPattern = Literal["none", "all", "use_bias", "attention_bias", "attention_bias_only", "attention_bias_and_mlp",
                      "qkv_only"]
BIAS_PATTERNS: dict[str, tuple[Callable[[bool, bool, bool], bool], str]] = {  # (fits(qkv, out, ffn), the family has)
    "none": (lambda qkv, out, ffn: not (qkv or out or ffn), "no biases"),
    "all": (lambda qkv, out, ffn: qkv and out and ffn, "a bias on every linear"),
    "use_bias": (lambda qkv, out, ffn: qkv == out == ffn, "one use_bias for every linear"),
    "attention_bias": (lambda qkv, out, ffn: qkv == out,
                       "one attention_bias for q, k, v and o (and mlp_bias for the MLP)"),
    "attention_bias_only": (lambda qkv, out, ffn: qkv == out and not ffn,
                            "one attention_bias for q, k, v and o, and none in the MLP"),
    "attention_bias_and_mlp": (lambda qkv, out, ffn: qkv == out and ffn,
                               "one attention_bias for q, k, v and o, and biases in the MLP"),
    "qkv_only": (lambda qkv, out, ffn: qkv and not (out or ffn), "biases on q, k and v only"),
}
BLOCK_NAMES = {"parallel": "'parallel' (two norms)"}  # how a misfit names a block layout, when not by its name
SHARED_BLOCK_NAMES = {"parallel": "'parallel' with shared_norm (one norm)"}  # ... in a family with one norm (Phi)
EITHER_BLOCK_NAMES = {"parallel": "'parallel' (one norm or two)"}  # ... in a family with either (Falcon)
FFNS = {"dense": ("blockspec", "'dense'"), "moe": ("blockspec-moe", "blockspec-moe's 'moe'")}  # distribution, name
QK_NORMS = {"none": "no q/k norm", "head": "q/k norms over each head ('head')",
            "all": "q/k norms over all heads' width ('all')"}


@frozen(kw_only=True)
class Expresses:
    """What one family's config.json can say, for its export checks (``misfits``): a spec that sets
    anything else is refused, by the spec key, with what the family has instead."""

    norm: Literal["rmsnorm", "layernorm"]  # a layernorm has a weight and a bias (unless not norm_affine)
    activations: tuple[str, ...]  # "swiglu", "gelu" (any approximation), "geglu-tanh" (that one)
    biases: BiasPattern = "none"  # which of qkv, out and the MLP have biases, and which agree
    positional: Literal["rope", "learned"] = "rope"
    blocks: tuple[str, ...] = ("pre",)  # block layouts: the core's pre, blockspec-blocks' others
    shared_norm: bool = False  # the parallel block's one norm feeds both sublayers (Phi): it must, or must not
    either_norm: bool = False  # the parallel block may have one norm or two (Falcon): shared_norm is not checked
    ffn: Literal["dense", "moe"] = "dense"
    windows: WindowPolicy = "none"  # [[layers]] may differ in nothing but these sliding windows (and NoPE below)
    nope_layers: bool = False  # [[layers]] may also skip RoPE (positional 'none'): SmolLM3's NoPE layers
    layer_rope: bool = False  # [[layers]] may also change the RoPE table: one for the sliding layers (Gemma 3)
    qk_norm: Literal["none", "head", "all"] = "none"  # what every layer has (with the norms' eps)
    qk_norm_offset: bool = False  # the q/k norms scale by (1 + w) (Gemma 3): the spec's must, or must not
    head_dim: bool = False  # a [model] head_dim other than d_model / n_heads
    grouped_kv: bool = True  # fewer kv heads than query heads
    fraction: bool = False  # partial RoPE ([positional] fraction, half layout)
    longrope: bool = False  # [positional] scaling = "longrope" (Phi-3): only where parity with transformers is tested
    offset: bool = False  # the RMSNorm scales by (1 + w): the spec's norm must, or must not
    embedding_scale: bool = False  # embeddings times sqrt(d_model): the spec's must be, or not be, scaled
    attention_softcap: bool = False
    query_scale: bool = False  # a score scale other than 1/sqrt(head_dim)
    head_softcap: bool = False
    head_bias: bool = False  # the output layer has a bias (Phi)
    norm_affine: bool = True  # False: the layernorm has neither weight nor bias (OLMo): the spec's must not either
    sinks: bool = False  # the attention has a learned sink logit per head (gpt-oss): it must, or must not
    attention: Literal["causal", "mla"] = "causal"  # the core's attention, or blockspec-attention's mla (DeepSeek)
    dense_first: bool = False  # [[layers]] may give the first layers the core's dense FFN (first_k_dense_replace)

    def misfits(self, spec: ModelSpec) -> list[str]:
        """Why ``spec`` cannot be exported as a family that expresses this, one phrase each; empty: it can."""
        return (_component_misfits(spec, self) + _model_misfits(spec, self) + _attention_misfits(spec, self)
                + _layer_misfits(spec, self.windows, self.nope_layers, self.layer_rope, self.dense_first))


def _component_misfits(spec: ModelSpec, has: Expresses) -> list[str]:
    problems = [f"{kind} is {getattr(spec, kind).name!r}, expected {name!r}"
                for kind, name in (("head", "lm"), ("attention", has.attention), ("positional", has.positional))
                if getattr(spec, kind).name != name]
    problems += _block_misfits(spec.block, has.blocks, has.shared_norm, has.either_norm)
    problems += _ffn_misfits(spec.ffn, has.ffn)
    problems += _norm_misfits(spec.norm, has.norm, has.norm_affine)
    problems += _activation_misfits(spec.activation, has.activations)
    if not spec.model.has_final_norm:
        problems.append("[model] final_norm = false: the family's stack ends with a norm")
    if spec.adapters:  # the family's weights are plain linear layers: an adapter must be folded into them first
        problems.append(f"adapter {spec.adapters[0].use!r} wraps layers the family stores as plain weights: "
                        "merge the adapters into the base first")
    return problems


def _block_misfits(block: ComponentSpec, layouts: tuple[str, ...], shared_norm: bool = False,
                   either_norm: bool = False) -> list[str]:
    shared = getattr(block.config, "shared_norm", False)
    known = block.distribution in (None, "blockspec", "blockspec-blocks")
    if block.name in layouts and known and (shared == shared_norm or either_norm):
        return []
    if either_norm:
        return [f"block is {block.use!r}, expected " + either(EITHER_BLOCK_NAMES.get(n, repr(n)) for n in layouts)]
    unshared = shared_norm and block.name == "parallel"
    found = " with shared_norm" if shared else " without shared_norm" if unshared else ""
    names = SHARED_BLOCK_NAMES if shared_norm else BLOCK_NAMES
    return [f"block is {block.use!r}{found}, expected " + either(names.get(name, repr(name)) for name in layouts)]


# blockspec-moe's routing options a plain softmax top-k over routed experts lacks, each with its one value
SOFTMAX_TOP_K: Mapping[str, Any] = MappingProxyType({
    "n_shared_experts": 0, "scoring": "softmax", "n_group": 1, "topk_group": 1, "routed_scaling": 1.0,
    "correction_bias": False, "router_bias": False})


def moe_option_misfits(spec: ModelSpec, expected: Mapping[str, Any], routes: str) -> list[str]:
    """The blockspec-moe options the family's router cannot say (``expected``: each option's one value, and
    expert_d_ff = d_ff where given); none when the ffn is not blockspec-moe's (that is its own misfit)."""
    ffn = spec.ffn
    if ffn.name != "moe" or ffn.distribution not in (None, "blockspec-moe"):
        return []
    changed = [name for name, value in expected.items() if getattr(ffn.config, name, value) != value]
    if "expert_d_ff" in expected and ffn.config.expert_d_ff in (None, spec.model.d_ff):
        changed = [name for name in changed if name != "expert_d_ff"]
    if not changed:
        return []
    wanted = ", ".join("expert_d_ff = d_ff" if n == "expert_d_ff" else f"{n} = {expected[n]!r}" for n in changed)
    return [f"[ffn] {', '.join(changed)}: {routes} (expected {wanted})"]


def _ffn_misfits(ffn: ComponentSpec, kind: str) -> list[str]:
    distribution, named = FFNS[kind]
    if ffn.name == kind and ffn.distribution in (None, distribution):
        return []
    return [f"ffn is {ffn.use!r}, expected {named}"]


def _norm_misfits(norm: ComponentSpec, name: str, affine_expected: bool = True) -> list[str]:
    if norm.name != name:
        return [f"norm is {norm.name!r}, expected {name!r}"]
    if name == "layernorm" and not affine_expected:
        return (["[norm] elementwise_affine = true: expected norm 'layernorm' without weight or bias "
                 "(elementwise_affine = false)"] if getattr(norm.config, "elementwise_affine", True) else [])
    affine = getattr(norm.config, "elementwise_affine", False) and getattr(norm.config, "bias", False)
    if name == "layernorm" and not affine:
        return ["[norm] elementwise_affine, bias: expected norm 'layernorm' with weight and bias"]
    return []


def activation_name(activation: ComponentSpec) -> str:
    """"swiglu", "gelu-tanh", "geglu-none", ...: the name, and the approximation where it has one."""
    approximate = getattr(activation.config, "approximate", None)
    return activation.name + (f"-{approximate}" if approximate else "")


def _activation_misfits(activation: ComponentSpec, names: tuple[str, ...]) -> list[str]:
    if activation.name in names or activation_name(activation) in names:
        return []
    return [f"activation is {activation_name(activation)!r}, expected {either(map(repr, names))}"]


def _model_misfits(spec: ModelSpec, has: Expresses) -> list[str]:
    m, problems = spec.model, _bias_misfits(spec, has.biases) + _positional_misfits(spec, has)
    if not has.head_dim and m.given_head_dim is not None and m.given_head_dim != m.d_model // m.n_heads:
        problems.append(f"[model] head_dim = {m.given_head_dim}: the family's head_dim is d_model / n_heads")
    if not has.grouped_kv and m.kv_heads != m.n_heads:
        problems.append(f"[model] n_kv_heads = {m.kv_heads}: the family has as many kv heads as query heads")
    scale = m.embedding_multiplier
    if has.embedding_scale != (scale is not None) or scale is not None and not math.isclose(scale, m.d_model**0.5):
        problems.append(f"[model] embedding_scale = {m.embedding_scale!r}: the family "
                        + ('scales the embeddings by sqrt(d_model) ("sqrt_d")' if has.embedding_scale
                           else "does not scale the embeddings"))
    offset = getattr(spec.norm.config, "offset", False)
    if offset != has.offset:
        problems.append(f"[norm] offset = {str(offset).lower()}: the family's RMSNorm scales by "
                        + ("1 + w" if has.offset else "w"))
    cap = getattr(spec.head.config, "logit_softcap", None)
    if cap is not None and not has.head_softcap:
        problems.append(f"[head] logit_softcap = {cap}: the family's logits are not capped")
    if getattr(spec.head.config, "bias", False) and not has.head_bias:
        problems.append("[head] bias = true: the family's output layer has no bias")
    return problems


def biases(spec: ModelSpec) -> tuple[bool, bool, bool]:
    """Whether the qkv projections, the output projection and the MLP have biases."""
    m, config = spec.model, spec.attention.config
    qkv, out = getattr(config, "qkv_bias", None), getattr(config, "out_bias", None)
    return (m.bias if qkv is None else qkv, m.bias if out is None else out, m.bias)


def _bias_misfits(spec: ModelSpec, pattern: str) -> list[str]:
    (qkv, out, ffn), (fits, has) = biases(spec), BIAS_PATTERNS[pattern]
    if fits(qkv, out, ffn):
        return []
    return [f"biases qkv = {str(qkv).lower()}, out = {str(out).lower()}, ffn = {str(ffn).lower()} ([model] bias, "
            f"[attention] qkv_bias, out_bias): the family has {has}"]


def _positional_misfits(spec: ModelSpec, has: Expresses) -> list[str]:
    """longrope only where the family reads it; a rotated fraction only where the family has one, and then in
    the half layout (an interleaved model's export permutes whole heads)."""
    config = spec.positional.config
    if getattr(config, "scaling", "none") == "longrope" and not has.longrope:
        return ['[positional] scaling = "longrope": blockspec imports longrope for Phi-3 (phi3) only']
    fraction = getattr(config, "fraction", 1.0)
    if fraction == 1.0:
        return []
    if not has.fraction:
        return [f"[positional] fraction = {fraction}: the family rotates every feature of a head"]
    if getattr(config, "layout", "half") != "half":
        return [f"[positional] layout = {config.layout!r} with a fraction: the family rotates a fraction in the "
                "half layout"]
    return []


def _attention_misfits(spec: ModelSpec, has: Expresses) -> list[str]:
    """The model-wide attention's options (the sliding window is the layers' check)."""
    attention = spec.attention.config
    if not isinstance(attention, CausalAttentionConfig):
        return []
    problems = _qk_norm_misfits(attention, has, getattr(spec.norm.config, "eps", None))
    if attention.logit_softcap is not None and not has.attention_softcap:
        problems.append(f"[attention] logit_softcap = {attention.logit_softcap}: the family has no attention "
                        "logit softcap")
    scale = attention.query_scale
    if scale is not None and not has.query_scale and not math.isclose(scale, spec.model.head_dim**-0.5):
        problems.append(f"[attention] query_scale = {scale}: the family scales scores by 1/sqrt(head_dim)")
    if attention.sinks != has.sinks:
        problems.append("[attention] sinks = true: the family's attention has no sink logits" if attention.sinks
                        else "[attention] sinks = false: the family's attention has a sink logit per head")
    return problems


def _qk_norm_misfits(attention: CausalAttentionConfig, has: Expresses, eps: float | None) -> list[str]:
    kind = has.qk_norm
    if attention.qk_norm_offset and not has.qk_norm_offset:  # only Gemma 3's q/k norms scale by 1 + w
        return ["[attention] qk_norm_offset = true: the family's q/k norms scale by w"]
    if attention.qk_norm != kind:
        return [f"[attention] qk_norm = {attention.qk_norm!r}: the family has {QK_NORMS[kind]}"]
    if kind != "none" and attention.qk_norm_eps != eps:
        return [f"[attention] qk_norm_eps = {attention.qk_norm_eps}: the family's q/k norms use the norms' eps "
                f"({eps})"]
    if has.qk_norm_offset and not attention.qk_norm_offset:
        return ["[attention] qk_norm_offset = false: the family's q/k norms scale by 1 + w"]
    return []


def _layer_misfits(spec: ModelSpec, policy: WindowPolicy, nope_layers: bool = False,
                   layer_rope: bool = False, dense_first: bool = False) -> list[str]:
    """Layers may differ in their attention's window alone (and, in a family with NoPE layers, in skipping
    RoPE, in one with a local RoPE, in their RoPE table, in one with dense first layers, in a dense FFN on
    the first layers), and only as the family's config.json can say."""
    dense = dense_layers(spec) if dense_first else []
    if dense and dense != list(range(len(dense))):
        return [f"[[layers]] ffn: the dense layers {dense} are not the first ones: the family's dense layers "
                "come first (first_k_dense_replace)"]
    varied = varied_layer(spec, nope_layers, layer_rope, dense_first)
    if varied is not None:
        beyond = ("sliding_window and a positional 'none' (NoPE)" if nope_layers
                  else "sliding_window and its RoPE table" if layer_rope else "sliding_window")
        alike = "the rest of every layer" if nope_layers or layer_rope or dense_first else "every layer"
        return [f"[[layers]]: layer {varied} differs from the model-wide tables beyond its attention's {beyond}: "
                f"the family configures {alike} alike"]
    kinds = _ropes_by_kind(spec) if layer_rope else []
    if kinds:
        return kinds
    found = windows_of(spec)
    widths = sorted({w for w in found if w is not None})
    if policy == "none" and widths:
        return [f"[attention] sliding_window = {widths[0]}: the family has full causal attention only"]
    if len(widths) > 1:
        return [f"[attention] sliding_window: {len(widths)} widths {widths} across the layers: the family has "
                "one sliding_window"]
    if policy == "all" and widths and None in found:
        return ["[attention] sliding_window on some layers ([[layers]]): the family's sliding_window applies to "
                "every layer"]
    return []


def _ropes_by_kind(spec: ModelSpec) -> list[str]:
    """The sliding layers share one RoPE table, and the full-attention layers one (perhaps another)."""
    windows = windows_of(spec)
    for kind, slides in (("sliding", True), ("full-attention", False)):
        tables: list[ComponentSpec] = []
        for i in (i for i, w in enumerate(windows) if (w is not None) == slides):
            tables += [] if spec.layer(i).positional in tables else [spec.layer(i).positional]
        if len(tables) > 1:
            return [f"[[layers]] positional: the {kind} layers rotate with {len(tables)} different RoPE tables: the "
                    "family has one for its sliding layers and one for its full-attention layers"]
    return []


def rope_of(positional: ComponentSpec) -> bool:
    """Whether a layer's positional is blockspec-positional's 'rope' (which a layer may vary in a family with a
    local RoPE)."""
    return positional.name == "rope" and positional.distribution in (None, "blockspec-positional")


def windows_of(spec: ModelSpec) -> list[int | None]:
    """Each layer's sliding window; None: full causal attention."""
    return [getattr(spec.layer(i).attention.config, "sliding_window", None) for i in range(spec.model.n_layers)]


def rope_free(positional: ComponentSpec) -> bool:
    """Whether a layer's positional is blockspec-positional's 'none': a NoPE layer, which rotates nothing."""
    return positional.name == "none" and positional.distribution in (None, "blockspec-positional")


def rope_free_layers(spec: ModelSpec) -> list[int]:
    """The layers whose positional is 'none' (NoPE)."""
    return [i for i in range(spec.model.n_layers) if rope_free(spec.layer(i).positional)]


def dense_layers(spec: ModelSpec) -> list[int]:
    """The layers whose FFN is the core's dense one while the model-wide FFN is another (DeepSeek's first)."""
    if _core_dense(spec.ffn):
        return []
    return [i for i in range(spec.model.n_layers) if _core_dense(spec.layer(i).ffn)]


def _core_dense(ffn: ComponentSpec) -> bool:
    return ffn.name == "dense" and ffn.distribution in (None, "blockspec")


def varied_layer(spec: ModelSpec, nope_layers: bool = False, layer_rope: bool = False,
                 dense_first: bool = False) -> int | None:
    """The first layer that differs from the model-wide tables in more than its attention's window (and, with
    ``nope_layers``, than a positional 'none'; with ``layer_rope``, than its RoPE table; with ``dense_first``,
    than a dense FFN)."""
    if not spec.layers:
        return None
    model_wide = _windowless(LayerSpec(block=spec.block, attention=spec.attention, ffn=spec.ffn, norm=spec.norm,
                                       activation=spec.activation, positional=spec.positional))

    def compared(layer: LayerSpec) -> LayerSpec:
        free = nope_layers and rope_free(layer.positional) or layer_rope and rope_of(layer.positional)
        layer = evolve(layer, positional=spec.positional) if free else layer
        return _windowless(evolve(layer, ffn=spec.ffn) if dense_first and _core_dense(layer.ffn) else layer)

    return next((i for i in range(spec.model.n_layers) if compared(spec.layer(i)) != model_wide), None)


def _windowless(layer: LayerSpec) -> LayerSpec:
    """The layer with its attention's sliding window removed, to compare layers up to their windows."""
    attention = layer.attention
    if not isinstance(attention.config, CausalAttentionConfig):
        return layer
    return evolve(layer, attention=evolve(attention, config=evolve(attention.config, sliding_window=None)))


def either(names: Iterable[str]) -> str:
    """"'a', 'b' or 'c'": the alternatives a message offers."""
    found = list(names)
    return found[0] if len(found) == 1 else f"{', '.join(found[:-1])} or {found[-1]}"


@frozen(kw_only=True)
class Family:
    name: str  # "gpt2": the family's short name
    title: str  # "GPT-2": as messages name it
    architectures: Mapping[str, str] = field(converter=dict)  # HF class name -> its model_type
    spec_dict: Callable[[ConfigReader, str], dict[str, Any]]
    misfits: Callable[[ModelSpec], list[str]]
    config_json: Callable[[ModelSpec], dict[str, Any]]
    rules: Callable[[ModelSpec], list[Rule]]
    layer_index: str
    normalize_name: Callable[[str], str] = same_name
    ignored: Callable[[str, ModelSpec], bool] = tied_head_copy

    @property
    def model_types(self) -> dict[str, str]:
        """model_type -> the HF class name it stands for, when config.json lists no architectures."""
        return {model_type: arch for arch, model_type in self.architectures.items()}
