"""Gemma (GemmaForCausalLM): the Gemma keys (``gemma_shared.BASE``) with its activation and defaults.

A pre-norm Llama with four differences: RMSNorm scales by (1 + w) (stored w is 0 for the identity),
the embeddings are multiplied by sqrt(hidden_size) rounded to the activations' dtype, the MLP gates
with tanh-approximated GELU (GeGLU), and head_dim is its own key (256 unless given). transformers
reads ``hidden_act``, rewriting the released configs' "gelu" to "gelu_pytorch_tanh"; transformers
before 5.0 read ``hidden_activation`` instead, so where both are set they must agree.
"""

from __future__ import annotations

from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.config_table import Document, Key, table_family
from blockspec.interop.families import gemma_shared, llama_like

ARCHITECTURE = "GemmaForCausalLM"
TANH_GELU = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")  # ACT2FN names of the tanh approximation


def _activation(r: ConfigReader, document: Document, title: str) -> None:
    """Only the tanh GELU imports: ``hidden_act`` (where "gelu" means it) and, if set, ``hidden_activation``
    (where "gelu" is the exact GELU that transformers before 5.0 computed for it)."""
    act, older = r.get("hidden_act", str, "gelu_pytorch_tanh"), r.get("hidden_activation", str, None)
    if act is not None and act not in ("gelu", *TANH_GELU):
        r.problem("hidden_act", f"unsupported activation {act!r}",
                  "Gemma's MLP gates with tanh-approximated GELU: expected gelu_pytorch_tanh (or gelu)")
    if older is not None and older not in TANH_GELU:
        r.problem("hidden_activation", f"{older!r} is not tanh-approximated GELU: transformers before 5.0 computed "
                  "it, later ones compute hidden_act", "expected gelu_pytorch_tanh, or remove the key")
    document["activation"] = {"use": "geglu", "approximate": "tanh"}


TABLE = gemma_shared.BASE.but(
    llama_like.kv_heads(16), llama_like.head_dim(256, as_given=True),  # GemmaConfig's defaults
    Key(name="hidden_act", read=_activation, write=lambda spec: {"hidden_act": "gelu_pytorch_tanh"},
        expresses={"activations": ("geglu-tanh",)}),  # hidden_activation too: read together
)

FAMILY = table_family(name="gemma", title="Gemma", architecture=ARCHITECTURE, model_type="gemma", table=TABLE,
                      rules=llama_like.rules, layer_index=llama_like.LAYER_INDEX, ignored=llama_like.ignored)
