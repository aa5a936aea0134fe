"""The Family protocol: everything blockspec knows about one Hugging Face model family.

Each family is one module under ``interop/families/`` that builds one ``Family`` (named
``FAMILY``); ``interop.families.FAMILIES`` lists them, and nothing outside that module
knows the family's config keys, architecture names or weight names:

- ``architectures``: the Hugging Face class names it imports, each with its ``model_type``
  (the first is what an export writes);
- ``spec_dict(reader, name)``: config.json -> a blockspec spec dict, reading every key
  through the ``ConfigReader`` and refusing, with ``reader.problem`` at that key and a
  reason, each one the blockspec model would compute differently;
- ``misfits(spec)``: why a spec cannot be exported as this family (empty: it can);
- ``config_json(spec)``: spec -> the architecture keys of config.json;
- ``rules(spec)``: the weight map (``interop.weight_map.Rule``), used both ways;
- ``layer_index``: a regex whose group 1 is the layer number of a per-layer tensor name;
- ``normalize_name(name)``: a stored tensor name -> the canonical name the rules use;
- ``ignored(name, spec)``: tensors transformers ignores too (buffers, a tied head's copy).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from attrs import field, frozen

from blockspec.assembly.builtin import CausalAttentionConfig
from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.weight_map import Rule
from blockspec.spec.schema import ModelSpec


def same_name(name: str) -> str:
    return name


def tied_head_copy(name: str, spec: ModelSpec) -> bool:
    """A tied model's redundant ``lm_head.weight`` (the embedding is the head)."""
    return name == "lm_head.weight" and spec.head.config.tied


def common_misfits(spec: ModelSpec) -> list[str]:
    """What every exported family needs: an LM head, causal attention, pre-norm blocks with a final norm, a dense FFN."""
    m = spec.model
    problems = []
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
    if spec.layers:
        problems.append("the layers differ ([[layers]]): the family configures every layer alike")
    return problems + option_misfits(spec)


def option_misfits(spec: ModelSpec) -> list[str]:
    """The attention, model, norm, positional and head options that neither exported family (GPT-2, Llama)
    expresses; each set to anything but its default is refused, with the reason."""
    m, problems = spec.model, []
    if m.given_head_dim is not None and m.given_head_dim != m.d_model // m.n_heads:
        problems.append(f"[model] head_dim = {m.given_head_dim}: the family's head_dim is d_model / n_heads")
    if m.embedding_scale is not None:
        problems.append("[model] embedding_scale: the family does not scale the embeddings")
    attention = spec.attention.config
    if isinstance(attention, CausalAttentionConfig):
        unsupported = {"qk_norm": (attention.qk_norm != "none", "no q/k norm"),
                       "logit_softcap": (attention.logit_softcap is not None, "no attention logit softcap"),
                       "sliding_window": (attention.sliding_window is not None, "full causal attention only"),
                       "query_scale": (attention.query_scale is not None, "scores are scaled by 1/sqrt(head_dim)")}
        for name, (chosen, reason) in unsupported.items():
            if chosen:
                problems.append(f"[attention] {name} = {getattr(attention, name)!r}: the family has {reason}")
        for name in ("qkv_bias", "out_bias"):
            value = getattr(attention, name)
            if value is not None and value != m.bias:
                problems.append(f"[attention] {name} = {str(value).lower()}: the family's attention biases follow "
                                f"[model] bias = {str(m.bias).lower()}")
    if getattr(spec.norm.config, "offset", False):
        problems.append("[norm] offset = true: the family's RMSNorm scales by w, not 1 + w")
    if getattr(spec.positional.config, "fraction", 1.0) != 1.0:
        problems.append(f"[positional] fraction = {spec.positional.config.fraction}: the family rotates every "
                        "feature of a head")
    if getattr(spec.head.config, "logit_softcap", None) is not None:
        problems.append("[head] logit_softcap: the family's logits are not capped")
    return problems


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
