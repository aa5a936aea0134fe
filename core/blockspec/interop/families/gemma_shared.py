"""What the Gemma and Gemma 2 families share: the Llama-like keys (``llama_like.BASE``) with an
``attention_bias`` on q, k, v and o (never on the MLP), RMSNorm scaling by (1 + w), embeddings times
sqrt(hidden_size), tied heads by default, and a refused ``use_bidirectional_attention``.

Both keep Llama's weight names for attention (q, k, v, o apart; blockspec fuses q|k|v) and for the
gated MLP (gate, up apart; blockspec's ffn.up is gate|up, gate first). They differ in where the norms
sit (the block), the activation key, and the attention options, which each family adds to ``BASE``.
"""

from __future__ import annotations

from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.config_table import Document, Key, tied
from blockspec.interop.families import llama_like


def _refuse_bidirectional(r: ConfigReader, document: Document, title: str) -> None:
    if r.get("use_bidirectional_attention", bool, False):
        r.problem("use_bidirectional_attention", "bidirectional attention is not supported",
                  "blockspec's language models attend causally; expected false or null")


BASE = llama_like.BASE.but(
    llama_like.ATTENTION_BIAS_ONLY, tied(True),
    Key(name="use_bidirectional_attention", read=_refuse_bidirectional),
    frame={"model": {**llama_like.BASE.frame["model"], "embedding_scale": "sqrt_d"}, "norm": {"offset": True}},
    offset=True, embedding_scale=True,
)
