"""Gemma 2 (Gemma2ForCausalLM): the Gemma keys (``gemma_shared.BASE``) and its own, and weight names.

Gemma's (1 + w) RMSNorm, sqrt(d) embedding scale and GeGLU, with four norms per layer (blockspec's
"sandwich" block: input, post-attention, pre-feedforward and post-feedforward norms), attention
logits capped at ``attn_logit_softcapping``, final logits at ``final_logit_softcapping``, queries
scaled by ``query_pre_attn_scalar``^-1/2, and sliding-window layers among global ones.

Windows: transformers lets key j be seen from query i when i - w < j <= i, the last w positions
with the query's own, as blockspec's ``sliding_window`` does, so w maps as it is. Which layers slide
comes from ``layer_types``, or, in configs older than that key, from transformers' default: even
layers slide, odd ones are global. The spec keeps the more common kind model-wide (layer 0's on a
tie) and writes the others as [[layers]] rules: ``every``/``offset`` where the pattern repeats.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from blockspec.spec.schema import MAX_LAYERS, ModelSpec
from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.config_table import Document, Key, accepted, table_family
from blockspec.interop.family import windows_of
from blockspec.interop.families import gemma_shared, llama_like
from blockspec.interop.weight_map import Rule

ARCHITECTURE = "Gemma2ForCausalLM"
SLIDING, FULL = "sliding_attention", "full_attention"
ACTIVATIONS = {  # hidden_activation -> blockspec's GeGLU approximation
    "gelu_pytorch_tanh": "tanh", "gelu_new": "tanh", "gelu_fast": "tanh", "gelu": "none",
}
NORMS = (("norm1", "input_layernorm"), ("post_attn_norm", "post_attention_layernorm"),
         ("norm2", "pre_feedforward_layernorm"), ("post_ffn_norm", "post_feedforward_layernorm"))


# ---------------------------------------------------------------- attention, activation, head


def _attention(r: ConfigReader, document: Document, title: str) -> None:
    """[attention]'s logit softcap and query scale (attn_logit_softcapping, query_pre_attn_scalar)."""
    scalar = r.get("query_pre_attn_scalar", float, 256.0)
    if scalar is not None and scalar <= 0:
        r.problem("query_pre_attn_scalar", f"expected a number > 0, found {scalar}")
        scalar = None
    options = {"logit_softcap": llama_like.nullable(r, "attn_logit_softcapping", float, 50.0),
               "query_scale": scalar**-0.5 if scalar else None}
    document["attention"].update({k: v for k, v in options.items() if v is not None})


def _attention_json(spec: ModelSpec) -> dict[str, Any]:
    scale = spec.attention.config.query_scale
    return {"query_pre_attn_scalar": spec.model.head_dim if scale is None else round(scale**-2),
            "attn_logit_softcapping": spec.attention.config.logit_softcap}


def scale_misfits(spec: ModelSpec) -> list[str]:
    scale = getattr(spec.attention.config, "query_scale", None)
    if scale is not None and abs(scale**-2 - round(scale**-2)) > 1e-6 * scale**-2:
        return [f"[attention] query_scale = {scale}: the family's is query_pre_attn_scalar^-1/2 for an integer "
                "query_pre_attn_scalar"]
    return []


def _approximate(r: ConfigReader, document: Document, title: str) -> None:
    act = r.get("hidden_activation", str, "gelu_pytorch_tanh")
    if act not in ACTIVATIONS and act is not None:
        r.problem("hidden_activation", f"unsupported activation {act!r}", f"supported: {', '.join(ACTIVATIONS)}")
    document["activation"] = {"use": "geglu", "approximate": ACTIVATIONS.get(act, "tanh")}


def _activation_json(spec: ModelSpec) -> dict[str, Any]:
    return {"hidden_activation": "gelu_pytorch_tanh" if spec.activation.config.approximate == "tanh" else "gelu"}


def _head(r: ConfigReader, document: Document, title: str) -> None:
    cap = llama_like.nullable(r, "final_logit_softcapping", float, 30.0)
    if cap is not None:
        document["head"]["logit_softcap"] = cap


# ---------------------------------------------------------------- sliding windows -> [[layers]]


def _read_windows(r: ConfigReader, document: Document, title: str) -> None:
    """The model-wide window in [attention], and [[layers]] rules for the layers whose window differs."""
    window, layers = _windows(r, document["model"]["n_layers"], document["attention"])
    document["attention"].update({} if window is None else {"sliding_window": window})
    document.update({"layers": layers} if layers else {})


def _windows(r: ConfigReader, n_layers: int | None, attention: dict[str, Any]) -> tuple[int | None, list[dict]]:
    """The model-wide window and the [[layers]] rules for the layers whose window differs."""
    if n_layers is None or not 0 < n_layers <= MAX_LAYERS:  # a layer count refused (or none) sizes no list
        r.accept("sliding_window", "layer_types")  # their key is not the one to name
        return None, []
    windows = _layer_windows(r, n_layers)
    if not windows:
        return None, []
    common = Counter(windows).most_common(1)[0][0]  # ties: layer 0's, the first seen
    p = period(windows)
    if p < len(windows):
        return common, [{"every": p, "offset": j, "attention": _override(windows[j], attention)}
                        for j in range(p) if windows[j] != common]
    others = [i for i, w in enumerate(windows) if w != common]
    return common, ([{"index": others, "attention": _override(windows[others[0]], attention)}] if others else [])


def period(windows: list[Any]) -> int:
    """The shortest p with windows[i] == windows[i % p] for every layer (2 for Gemma 2's alternation)."""
    return next(p for p in range(1, len(windows) + 1) if all(w == windows[i % p] for i, w in enumerate(windows)))


def _override(window: int | None, attention: dict[str, Any]) -> dict[str, Any]:
    """A rule's attention table: the window alone, or a fresh windowless table (``use`` drops the window)."""
    return {"sliding_window": window} if window is not None else dict(attention)


def _layer_windows(r: ConfigReader, n_layers: int) -> list[int | None]:
    """Each layer's window (None: global), from ``layer_types`` or transformers' default alternation."""
    window = llama_like.nullable(r, "sliding_window", int, 4096)
    types = r.get("layer_types", list, None)
    if types is None:
        types = [SLIDING if i % 2 == 0 else FULL for i in range(n_layers)]
    elif len(types) != n_layers or not all(kind in (SLIDING, FULL) for kind in types):  # entries of any type
        r.problem("layer_types", f"expected {n_layers} entries of {SLIDING!r} or {FULL!r}, found {types!r:.80}")
        return []
    if window is None and SLIDING in types and not r.refused("sliding_window"):  # null, not refused as too wide
        r.problem("sliding_window", f"null, but layer_types has {SLIDING!r} layers",
                  "transformers needs the window of those layers")
        return []
    return [window if kind == SLIDING else None for kind in types]


def windows_json(spec: ModelSpec) -> dict[str, Any]:
    windows = windows_of(spec)
    # transformers builds the sliding mask even when no layer slides, and fails without a window
    return {"sliding_window": next((w for w in windows if w is not None), spec.model.context_length),
            "layer_types": [FULL if w is None else SLIDING for w in windows]}


# ---------------------------------------------------------------- the table

TABLE = gemma_shared.BASE.but(
    llama_like.kv_heads(4), llama_like.head_dim(256, as_given=True),  # Gemma2Config's defaults
    # transformers reads hidden_activation for Gemma 2; hidden_act, which released configs carry too, never
    accepted("hidden_act"),
    Key(name="hidden_activation", read=_approximate, write=_activation_json,
        expresses={"activations": ("geglu-tanh", "geglu-none")}),
    Key(name="query_pre_attn_scalar", read=_attention, write=_attention_json, misfits=scale_misfits,
        expresses={"attention_softcap": True, "query_scale": True}),  # attn_logit_softcapping too
    Key(name="final_logit_softcapping", read=_head, expresses={"head_softcap": True},
        write=lambda spec: {"final_logit_softcapping": spec.head.config.logit_softcap}),
    Key(name="sliding_window", read=_read_windows, write=windows_json, expresses={"windows": "per_layer"}),
    # cache_implementation picks generate's cache class; sliding_window_size, in some released configs, no
    # transformers release reads (the window is sliding_window)
    accepted("cache_implementation"), accepted("sliding_window_size"),
    frame={"block": {"use": "sandwich"}}, blocks=("sandwich",),
)


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec) -> list[Rule]:
    return llama_like.rules(spec, NORMS)


FAMILY = table_family(name="gemma2", title="Gemma 2", architecture=ARCHITECTURE, model_type="gemma2", table=TABLE,
                      rules=rules, layer_index=llama_like.LAYER_INDEX, ignored=llama_like.ignored)
