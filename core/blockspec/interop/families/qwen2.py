"""Qwen2 (Qwen2ForCausalLM): the Llama-like keys (``llama_like.BASE``) with biases on q, k and v only, and
sliding windows on the layers ``layer_types`` (or, before it, ``max_window_layers``) says, when
``use_sliding_window``.

Per-layer windows become [[layers]] rules adding ``sliding_window`` to the sliding layers.
"""

from __future__ import annotations

from typing import Any

from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.config_table import Document, Key, table_family
from blockspec.interop.family import windows_of
from blockspec.interop.families import llama_like
from blockspec.spec.schema import ModelSpec

QWEN2 = "Qwen2ForCausalLM"
Windows = list[int | None]  # each layer's sliding window, None: full causal attention
LAYER_TYPES = {"full_attention": False, "attention": False, "sliding_attention": True}  # "attention": older name


def _windows(r: ConfigReader, n_layers: int | None) -> Windows:
    """Each layer's window as Qwen2Config and Qwen3Config decide it: sliding_window when
    use_sliding_window, on the layers ``layer_types`` says slide (newer transformers), else on layers
    max_window_layers and above (what older ones did, and what newer ones derive layer_types from)."""
    window = llama_like.nullable(r, "sliding_window", int, 4096)
    window = window if r.get("use_sliding_window", bool, False) else None
    first, n = r.get("max_window_layers", int, 28), n_layers or 0
    types = r.get("layer_types", list, None)
    if types is None:  # a refused max_window_layers (None) decides no window: the refusal says why
        return [window if window is not None and first is not None and i >= first else None for i in range(n)]
    return typed_windows(r, types, window, n)


def typed_windows(r: ConfigReader, types: list[Any], window: int | None, n_layers: int) -> Windows:
    """Each layer's window from ``layer_types`` (full or sliding), refused at the key where it cannot be one:
    an unknown type, the wrong length, sliding layers without a window (Qwen2's and SmolLM3's rule)."""
    unknown = [t for t in types if not isinstance(t, str) or t not in LAYER_TYPES]  # a list or a table too
    if unknown:
        r.problem("layer_types", f"unsupported layer type {unknown[0]!r:.40}", "expected full_attention or "
                  "sliding_attention")
    elif len(types) != n_layers:
        r.problem("layer_types", f"{len(types)} entries for num_hidden_layers = {n_layers}")
    elif window is None and "sliding_attention" in types:
        r.problem("layer_types", "sliding_attention layers without a window", "transformers cannot build them: "
                  "use_sliding_window is false (its mask slides, its flash attention does not) or sliding_window "
                  "is null")
    else:
        return [window if LAYER_TYPES[t] else None for t in types]
    return [None] * n_layers


def _read_windows(r: ConfigReader, document: Document, title: str) -> None:
    place_windows(document, _windows(r, document["model"]["n_layers"]))


def place_windows(document: Document, windows: Windows, selector=None) -> None:
    """The windows in [attention] when every layer slides, else a [[layers]] rule adding the window to the
    sliding ones (one width, as transformers has), selected by ``selector`` (default: a run, or the index)."""
    sliding = [i for i, w in enumerate(windows) if w is not None]
    if sliding and len(sliding) == len(windows):
        document["attention"]["sliding_window"] = windows[0]
    elif sliding:
        chosen = (selector or _selector)(sliding, len(windows))
        document["layers"] = [{**chosen, "attention": {"sliding_window": windows[sliding[0]]}}]


def _selector(layers: list[int], n_layers: int) -> dict[str, Any]:
    """from/to for a run of layers (max_window_layers gives the top ones), else their index list."""
    if layers != list(range(layers[0], layers[-1] + 1)):
        return {"index": layers}
    return {"from": layers[0]} if layers[-1] == n_layers - 1 else {"from": layers[0], "to": layers[-1]}


def _write_windows(spec: ModelSpec) -> dict[str, Any]:
    """layer_types for newer transformers, max_window_layers (the first sliding layer) for older ones, which
    slide every layer from there on."""
    windows = windows_of(spec)
    sliding = [i for i, w in enumerate(windows) if w is not None]
    return {"use_sliding_window": bool(sliding), "sliding_window": windows[sliding[0]] if sliding else None,
            "max_window_layers": sliding[0] if sliding else spec.model.n_layers,
            "layer_types": ["sliding_attention" if w is not None else "full_attention" for w in windows]}


def _refuse_mrope(r: ConfigReader, document: Document, title: str) -> None:
    if r.get("use_mrope", bool, False):
        r.problem("use_mrope", "multimodal RoPE (Qwen2-VL) is not supported",
                  "Qwen2ForCausalLM rotates by the token position alone; expected false")


# Qwen's window keys, read together: use_sliding_window, sliding_window, max_window_layers, layer_types
WINDOWS = Key(name="sliding_window", read=_read_windows, write=_write_windows, expresses={"windows": "per_layer"})

TABLE = llama_like.BASE.but(
    llama_like.head_dim(always=False),  # not a Qwen2Config key, but Qwen2Attention reads it when given
    Key(name="use_mrope", read=_refuse_mrope), WINDOWS,
    frame={"attention": {"use": "causal", "qkv_bias": True}}, biases="qkv_only",
)

FAMILY = table_family(name="qwen2", title="Qwen2", architecture=QWEN2, model_type="qwen2", table=TABLE,
                      rules=llama_like.rules, layer_index=llama_like.LAYER_INDEX, ignored=llama_like.ignored)
