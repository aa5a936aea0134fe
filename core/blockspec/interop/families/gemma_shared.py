"""What the Gemma, Gemma 2 and OLMo 2 families share.

All three keep Llama's weight names for attention (q, k, v, o apart; blockspec fuses q|k|v) and
for the gated MLP (gate, up apart; blockspec's ffn.up is gate|up, gate first), with an MLP that
never has biases while attention has them when ``attention_bias``: blockspec's [model] bias is
false and [attention] qkv_bias/out_bias carry ``attention_bias``. They differ in where the norms
sit (the block), the norms' (1 + w) offset, the embedding scale and the attention options; a
``Layout`` states those per family, and ``misfits`` checks a spec against it for export.

These misfits are a variant of ``interop.family.common_misfits``/``option_misfits``, which
refuse every block but "pre" and every option these families have.
"""

from __future__ import annotations

import math
import re
from typing import Any

from attrs import evolve, frozen

from blockspec.assembly.builtin import CausalAttentionConfig
from blockspec.interop.config_reader import ConfigReader, rope, rope_json
from blockspec.interop.family import tied_head_copy
from blockspec.interop.weight_map import Rule, same, stacked
from blockspec.spec.schema import LayerSpec, ModelSpec

LAYER_INDEX = r"^model\.layers\.(\d+)\."
IGNORED = re.compile(r"\.rotary_emb\.inv_freq$")  # a buffer older transformers versions saved
DISTRIBUTIONS = {"block": ("blockspec-blocks",), "ffn": ("blockspec",)}  # a pinned block or FFN must be these
ATTENTION_OPTIONS = ("qk_norm", "logit_softcap", "sliding_window", "query_scale")


# ---------------------------------------------------------------- config.json -> spec


def nullable(r: ConfigReader, key: str, kind: type, default: Any) -> Any:
    """A key whose explicit null switches a feature off (a softcap, a window): absent takes transformers'
    default, null is None (``ConfigReader.get`` reads null as absent)."""
    if key in r.config and r.config[key] is None:
        r.accept(key)
        return None
    return r.get(key, kind, default)


def model_table(r: ConfigReader, name: str, *, head_dim: int | None, kv_heads: int | None) -> dict[str, Any]:
    """The [model] table; ``head_dim`` and ``kv_heads`` are transformers' defaults for an absent key
    (None: derived from the other sizes, as blockspec does)."""
    n_heads = r.get("num_attention_heads", int)
    given_head_dim = r.get("head_dim", int, head_dim)
    model = {
        "name": name, "vocab_size": r.get("vocab_size", int), "d_model": r.get("hidden_size", int),
        "context_length": r.get("max_position_embeddings", int), "n_layers": r.get("num_hidden_layers", int),
        "n_heads": n_heads, "n_kv_heads": r.get("num_key_value_heads", int, kv_heads or n_heads),
        "d_ff": r.get("intermediate_size", int), "bias": False, "norm_placement": "pre",
        "dropout": r.get("attention_dropout", float, 0.0),
    }
    if given_head_dim is not None:
        model["head_dim"] = given_head_dim
    return model


def attention_table(r: ConfigReader, **options: Any) -> dict[str, Any]:
    """[attention]: causal, with ``attention_bias`` on q, k, v and o (never on the MLP) and ``options``."""
    table: dict[str, Any] = {"use": "causal", **options}
    if r.get("attention_bias", bool, False):
        table.update(qkv_bias=True, out_bias=True)
    return table


def positional_table(r: ConfigReader, family: str) -> dict[str, Any]:
    """[positional]: the shared rope reader; partial rotation is refused (these families rotate every feature)."""
    positional = rope(r)
    if "fraction" in positional:
        r.problem("partial_rotary_factor", f"partial RoPE (factor {positional.pop('fraction')}) is not supported",
                  f"the {family} family rotates every feature of a head; expected 1.0")
    return positional


def refuse_bidirectional(r: ConfigReader) -> None:
    if r.get("use_bidirectional_attention", bool, False):
        r.problem("use_bidirectional_attention", "bidirectional attention is not supported",
                  "blockspec's language models attend causally; expected false or null")


# ---------------------------------------------------------------- spec -> config.json


@frozen(kw_only=True)
class Layout:
    """What one family's config.json can say, for the export checks."""

    block: str  # "pre", "sandwich" or "output_norm"
    offset: bool  # the RMSNorm scales by (1 + w)
    scaled: bool  # the embeddings are multiplied by sqrt(d_model)
    activations: tuple[str, ...]  # activation_name() values the family's MLP computes
    options: tuple[str, ...] = ()  # the attention options (ATTENTION_OPTIONS) it expresses
    head_softcap: bool = False
    layered: bool = False  # [[layers]] may vary the attention's sliding window (Gemma 2)


def activation_name(spec: ModelSpec) -> str:
    """"swiglu", "geglu-tanh", "geglu-none", ... as the export checks name them."""
    approximate = getattr(spec.activation.config, "approximate", None)
    return spec.activation.name + (f"-{approximate}" if approximate else "")


def misfits(spec: ModelSpec, layout: Layout) -> list[str]:
    return (_component_misfits(spec, layout) + _model_misfits(spec, layout)
            + attention_misfits(spec, layout) + _layer_misfits(spec, layout))


def _component_misfits(spec: ModelSpec, layout: Layout) -> list[str]:
    problems = []
    for kind, name in (("head", "lm"), ("attention", "causal"), ("ffn", "dense"), ("block", layout.block),
                       ("positional", "rope"), ("norm", "rmsnorm")):
        component = getattr(spec, kind)
        foreign = kind in DISTRIBUTIONS and component.distribution not in (None, *DISTRIBUTIONS[kind])
        if component.name != name or foreign:
            problems.append(f"{kind} is {component.use!r}, expected {name!r}")
    if not spec.model.has_final_norm:
        problems.append("expected a final norm")
    if activation_name(spec) not in layout.activations:
        problems.append(f"activation is {activation_name(spec)!r}, expected {' or '.join(layout.activations)}")
    return problems


def _model_misfits(spec: ModelSpec, layout: Layout) -> list[str]:
    m, problems = spec.model, []
    if m.bias:
        problems.append("[model] bias = true: the family's MLP has no biases (attention biases: [attention] "
                        "qkv_bias and out_bias)")
    scale = m.embedding_multiplier
    if layout.scaled != (scale is not None) or scale is not None and not math.isclose(scale, m.d_model**0.5):
        problems.append(f"[model] embedding_scale = {m.embedding_scale!r}: the family's is "
                        + ('"sqrt_d"' if layout.scaled else "none"))
    if getattr(spec.norm.config, "offset", False) != layout.offset:
        problems.append(f"[norm] offset = {str(not layout.offset).lower()}: the family's RMSNorm scales by "
                        + ("1 + w" if layout.offset else "w"))
    if getattr(spec.positional.config, "fraction", 1.0) != 1.0:
        problems.append("[positional] fraction: the family rotates every feature of a head")
    if getattr(spec.head.config, "logit_softcap", None) is not None and not layout.head_softcap:
        problems.append("[head] logit_softcap: the family's logits are not capped")
    return problems


def attention_misfits(spec: ModelSpec, layout: Layout) -> list[str]:
    """The model-wide attention's options the family cannot express, and unequal q/k/v and o biases."""
    attention, problems = spec.attention.config, []
    if not isinstance(attention, CausalAttentionConfig):
        return problems
    for name in ATTENTION_OPTIONS:
        value = getattr(attention, name)
        unset = value in (None, "none") or name == "query_scale" and math.isclose(value, spec.model.head_dim**-0.5)
        if not unset and name not in layout.options:
            problems.append(f"[attention] {name} = {value!r}: the family has no such option")
    if attention_bias(spec, attention) != _bias(spec, attention.out_bias):
        problems.append("[attention] qkv_bias and out_bias differ: the family's attention_bias sets both")
    return problems


def _layer_misfits(spec: ModelSpec, layout: Layout) -> list[str]:
    """[[layers]]: only the attention's sliding window may vary, and only where the family has per-layer windows."""
    if not spec.layers:
        return []
    if not layout.layered:
        return ["the layers differ ([[layers]]): the family configures every layer alike"]
    model_wide = _windowless(LayerSpec(block=spec.block, attention=spec.attention, ffn=spec.ffn, norm=spec.norm,
                                       activation=spec.activation, positional=spec.positional))
    varied = [i for i in range(spec.model.n_layers) if _windowless(spec.layer(i)) != model_wide]
    if varied:
        return [f"layer {varied[0]} differs from the model-wide tables in more than the attention's "
                "sliding_window: the family's layers differ in their window alone"]
    return []


def _windowless(layer: LayerSpec) -> LayerSpec:
    """The layer with its attention's sliding window removed, to compare layers up to their windows."""
    attention = layer.attention
    if not isinstance(attention.config, CausalAttentionConfig):
        return layer
    return evolve(layer, attention=evolve(attention, config=evolve(attention.config, sliding_window=None)))


def _bias(spec: ModelSpec, value: bool | None) -> bool:
    return spec.model.bias if value is None else value


def attention_bias(spec: ModelSpec, attention: Any) -> bool:
    """Whether q, k and v have biases (the family's ``attention_bias``)."""
    return _bias(spec, getattr(attention, "qkv_bias", None))


def config_keys(spec: ModelSpec) -> dict[str, Any]:
    """The config.json keys every one of these families writes alike."""
    m = spec.model
    return {
        "vocab_size": m.vocab_size, "hidden_size": m.d_model, "intermediate_size": m.d_ff,
        "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads, "num_key_value_heads": m.kv_heads,
        "head_dim": m.head_dim, "max_position_embeddings": m.context_length, "rms_norm_eps": spec.norm.config.eps,
        **rope_json(spec.positional.config), "attention_bias": attention_bias(spec, spec.attention.config),
        "attention_dropout": m.dropout, "tie_word_embeddings": spec.head.config.tied,
    }


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec, norms: tuple[tuple[str, str], ...]) -> list[Rule]:
    """The weight map; ``norms`` pairs each of a block's norms with its Hugging Face name in the layer."""
    found = [same("embedding.weight", "model.embed_tokens.weight"), same("final_norm.weight", "model.norm.weight")]
    for i in range(spec.model.n_layers):
        ours, theirs = f"blocks.{i}", f"model.layers.{i}"
        found += [same(f"{ours}.{mine}.weight", f"{theirs}.{hf}.weight") for mine, hf in norms]
        found += _attention(spec, i, ours, theirs) + _mlp(spec, ours, theirs)
    if not spec.head.config.tied:
        found.append(same("head.weight", "lm_head.weight"))
    return found


def _attention(spec: ModelSpec, i: int, ours: str, theirs: str) -> list[Rule]:
    m, attention = spec.model, spec.layer(i).attention.config
    kv_width = m.kv_heads * m.head_dim
    sizes = (m.n_heads * m.head_dim, kv_width, kv_width)
    suffixes = ("weight", "bias") if attention_bias(spec, attention) else ("weight",)
    found = []
    for suffix in suffixes:
        found += [stacked(f"{ours}.attn.qkv.{suffix}", [f"{theirs}.self_attn.{p}_proj.{suffix}" for p in "qkv"], sizes),
                  same(f"{ours}.attn.proj.{suffix}", f"{theirs}.self_attn.o_proj.{suffix}")]
    if getattr(attention, "qk_norm", "none") != "none":
        found += [same(f"{ours}.attn.{p}_norm.weight", f"{theirs}.self_attn.{p}_norm.weight") for p in "qk"]
    return found


def _mlp(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    d_ff = spec.model.d_ff
    return [stacked(f"{ours}.ffn.up.weight", [f"{theirs}.mlp.gate_proj.weight", f"{theirs}.mlp.up_proj.weight"],
                    (d_ff, d_ff)),
            same(f"{ours}.ffn.down.weight", f"{theirs}.mlp.down_proj.weight")]


def ignored(name: str, spec: ModelSpec) -> bool:
    return bool(IGNORED.search(name)) or tied_head_copy(name, spec)
