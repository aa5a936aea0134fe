"""Mistral (MistralForCausalLM): the Llama-like keys (``llama_like.BASE``) without biases, and a sliding
window on every layer (``sliding_window``, 4096 when absent; null: full attention, as from Mistral 7B v0.2 on).

transformers' window and blockspec's agree: query i sees keys i - w + 1 .. i, its own included.
"""

from __future__ import annotations

from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.config_table import Document, Key, table_family
from blockspec.interop.families import llama_like

MISTRAL = "MistralForCausalLM"


def _layer_types(r: ConfigReader, document: Document, title: str) -> None:
    """MistralForCausalLM ignores layer_types (every layer has sliding_window): a config whose layer_types
    disagree meant another model (Ministral alternates), so only agreeing ones are accepted."""
    types = r.get("layer_types", list, None)
    expected = "full_attention" if document["attention"].get("sliding_window") is None else "sliding_attention"
    if types is not None and any(t != expected for t in types):
        r.problem("layer_types", f"expected every layer {expected!r}: MistralForCausalLM gives every layer the "
                  "same attention and ignores layer_types", "alternating layers are a MinistralForCausalLM")


TABLE = llama_like.BASE.but(llama_like.sliding_window(4096), Key(name="layer_types", read=_layer_types))

FAMILY = table_family(name="mistral", title="Mistral", architecture=MISTRAL, model_type="mistral", table=TABLE,
                      rules=llama_like.rules, layer_index=llama_like.LAYER_INDEX, ignored=llama_like.ignored)
