"""SmolLM3 (SmolLM3ForCausalLM): Llama's keys (``llama.TABLE``) and weight names, with RoPE-free (NoPE) layers
and sliding windows per layer.

``no_rope_layers`` holds one int per layer: 1, the layer rotates q and k; 0, it does not. Absent, SmolLM3Config
makes every ``no_rope_layer_interval``-th layer NoPE (4: layers 3, 7, 11, ...). The NoPE layers become one
[[layers]] entry with ``positional = { use = "none" }``: ``every``/``offset`` when they are every k-th layer
to the end, else their ``index`` list. A window slides on the layers ``layer_types`` says (absent: on the NoPE
layers) when ``use_sliding_window`` and ``sliding_window`` give one, a [[layers]] entry as Qwen2's.
SmolLM3Config's defaults are not Llama's: 4 kv heads, a tied head, rope_theta 2e6.
"""

from __future__ import annotations

from typing import Any

from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.config_table import Document, Key, accepted, put, table_family, tied
from blockspec.interop.family import rope_free_layers, windows_of
from blockspec.interop.families import llama, llama_like
from blockspec.interop.families.qwen2 import typed_windows
from blockspec.spec.schema import ModelSpec

ARCHITECTURE = "SmolLM3ForCausalLM"
DEFAULT_BASE = 2e6  # SmolLM3Config.default_theta: the rope base when no place gives one
DEFAULT_KV_HEADS = 4  # SmolLM3Config's num_key_value_heads when absent (null: num_attention_heads)
DEFAULT_INTERVAL = 4  # SmolLM3Config's no_rope_layer_interval
Windows = list[int | None]  # each layer's sliding window, None: full causal attention


# ---------------------------------------------------------------- sizes and rope


def _kv_heads(r: ConfigReader, document: Document, title: str) -> None:
    """SmolLM3Config's 4 when absent (Llama's default is one per query head), one per query head when null."""
    heads = llama_like.nullable(r, "num_key_value_heads", int, DEFAULT_KV_HEADS)
    put(document, "model.n_kv_heads", heads if heads is not None else document["model"]["n_heads"])


def _theta_given(r: ConfigReader) -> bool:
    """Whether the rope table transformers reads (rope_scaling when set, else rope_parameters) or the top level
    gives rope_theta; if neither does, SmolLM3Config takes its default_theta."""
    scaling = r.config.get("rope_scaling")
    table = scaling if isinstance(scaling, dict) and scaling else r.config.get("rope_parameters")
    return isinstance(table, dict) and table.get("rope_theta") is not None or r.config.get("rope_theta") is not None


def _positional(r: ConfigReader, document: Document, title: str) -> None:
    """Llama's full RoPE, with SmolLM3's base 2e6 where no key gives one (rope(r) would take 10000)."""
    positional = llama_like.full_rope(r, title)
    if not _theta_given(r):
        positional["base"] = DEFAULT_BASE
    document["positional"] = positional


# ---------------------------------------------------------------- NoPE layers and windows


def _rotating(r: ConfigReader, n_layers: int) -> list[bool]:
    """Whether each layer rotates q and k, as SmolLM3Config decides: ``no_rope_layers`` when given, else all
    but every ``no_rope_layer_interval``-th layer."""
    interval = llama_like.nullable(r, "no_rope_layer_interval", int, DEFAULT_INTERVAL)
    given = r.get("no_rope_layers", list, None)
    if given is not None:
        return _given_rotating(r, given, n_layers)
    if interval is None or interval < 1:
        r.problem("no_rope_layer_interval", f"expected a positive integer, found {interval}",
                  "without no_rope_layers, SmolLM3Config makes every interval-th layer NoPE")
        return [True] * n_layers
    return [(i + 1) % interval != 0 for i in range(n_layers)]


def _given_rotating(r: ConfigReader, given: list[Any], n_layers: int) -> list[bool]:
    """no_rope_layers: 1 or 0 for each layer; entries past num_hidden_layers go unread, as in transformers."""
    odd = [v for v in given if type(v) is not int or v not in (0, 1)]
    if odd:
        r.problem("no_rope_layers", f"unsupported entry {odd[0]!r:.40}", "expected 1 (the layer uses RoPE) or 0 "
                  "(it does not)")
    elif len(given) < n_layers:
        r.problem("no_rope_layers", f"{len(given)} entries for num_hidden_layers = {n_layers}",
                  "SmolLM3 reads one per layer")
    else:
        return [v == 1 for v in given[:n_layers]]
    return [True] * n_layers


def _windows(r: ConfigReader, rotating: list[bool]) -> Windows:
    """Each layer's window as SmolLM3 builds it: sliding_window when use_sliding_window, on the layers
    ``layer_types`` says slide, or (no layer_types) on the NoPE layers, as SmolLM3Config derives them."""
    window = llama_like.nullable(r, "sliding_window", int, None)
    window = window if r.get("use_sliding_window", bool, False) else None
    types = r.get("layer_types", list, None)
    if types is None:
        return [None if rotates else window for rotates in rotating]
    return typed_windows(r, types, window, len(rotating))


def layer_selector(layers: list[int], n_layers: int) -> dict[str, Any]:
    """every/offset for every k-th layer from one on to the end (SmolLM3's every fourth), else the index list."""
    step = layers[1] - layers[0] if len(layers) > 1 else 0
    if step and layers == list(range(layers[0], n_layers, step)):
        return {"every": step, "offset": layers[0]}
    return {"index": layers}


def _read_layers(r: ConfigReader, document: Document, title: str) -> None:
    """A [[layers]] entry making the NoPE layers' positional 'none', and the windows as Qwen2's: in
    [attention] when every layer slides, else an entry adding the window to the sliding layers."""
    rotating = _rotating(r, document["model"]["n_layers"] or 0)
    windows = _windows(r, rotating)
    nope = [i for i, rotates in enumerate(rotating) if not rotates]
    sliding = [i for i, w in enumerate(windows) if w is not None]
    rules = [{**layer_selector(nope, len(rotating)), "positional": {"use": "none"}}] if nope else []
    if sliding and len(sliding) == len(windows):
        document["attention"]["sliding_window"] = windows[0]
    elif sliding:
        rules.append({**layer_selector(sliding, len(windows)), "attention": {"sliding_window": windows[sliding[0]]}})
    if rules:
        document["layers"] = rules


def _write_layers(spec: ModelSpec) -> dict[str, Any]:
    """no_rope_layers, which transformers reads first, and the interval too where it derives the same layers
    (for readers of the interval alone); layer_types with the one window."""
    n_layers, nope, windows = spec.model.n_layers, rope_free_layers(spec), windows_of(spec)
    sliding, skipping = [i for i, w in enumerate(windows) if w is not None], set(nope)
    found: dict[str, Any] = {"no_rope_layers": [int(i not in skipping) for i in range(n_layers)]}
    if nope and nope == list(range(nope[0], n_layers, nope[0] + 1)):  # every k-th layer, from layer k - 1 on
        found["no_rope_layer_interval"] = nope[0] + 1
    return {**found, "use_sliding_window": bool(sliding), "sliding_window": windows[sliding[0]] if sliding else None,
            "layer_types": ["sliding_attention" if w is not None else "full_attention" for w in windows]}


# no_rope_layers, no_rope_layer_interval, use_sliding_window, sliding_window, layer_types, read together
LAYER_OPTIONS: dict[str, Any] = {"windows": "per_layer", "nope_layers": True}  # what [[layers]] may vary
LAYERS = Key(name="no_rope_layers", read=_read_layers, write=_write_layers, expresses=LAYER_OPTIONS)

TABLE = llama.TABLE.without("sliding_window").but(
    Key(name="num_key_value_heads", read=_kv_heads, write=lambda spec: {"num_key_value_heads": spec.model.kv_heads}),
    llama_like.head_dim(always=False),  # not a SmolLM3Config key, but SmolLM3Attention reads it when given
    llama_like.rope_key(_positional), tied(True), LAYERS,
    accepted("max_window_layers"),  # Qwen2's key, which SmolLM3 configs may carry (copied) and SmolLM3 never reads
)

FAMILY = table_family(name="smollm3", title="SmolLM3", architecture=ARCHITECTURE, model_type="smollm3",
                      table=TABLE, rules=llama_like.rules, layer_index=llama_like.LAYER_INDEX,
                      ignored=llama_like.ignored)
