"""Gemma 3's text model (Gemma3ForCausalLM, model_type gemma3_text): Gemma 2's keys and weight names
(``gemma2.TABLE``), with (1 + w) RMSNorms of q and k over each head, a local RoPE on the sliding layers,
and no attention logit softcap.

Which layers slide comes from ``layer_types``, or, in configs older than that key, as Gemma3TextConfig
derives it: every ``sliding_window_pattern``-th layer (6: layers 5, 11, ...) is global, the rest slide
``sliding_window`` wide. The global layers rotate with ``rope_parameters["full_attention"]``
(transformers 5) or ``rope_theta`` and ``rope_scaling`` (transformers 4), base 1e6 when none is given;
the sliding ones with ``rope_parameters["sliding_attention"]`` or ``rope_local_base_freq``, base 1e4 and
unscaled (transformers 4 gave them no scaling). The spec keeps the more common kind of layer model-wide,
its window and its RoPE (the sliding kind, for Gemma 3's 5:1), and writes the others as [[layers]] rules,
``every``/``offset`` where the pattern repeats: their attention afresh and their RoPE table.

transformers' Gemma 3 attention reads ``attn_logit_softcapping`` but never caps its scores, so a cap is
refused: blockspec would apply it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import attrs

from blockspec.interop.config_reader import ConfigReader, rope_json
from blockspec.interop.config_table import Document, Key, accepted, table_family
from blockspec.interop.family import rope_of, windows_of
from blockspec.interop.families import gemma2, llama_like
from blockspec.spec.schema import MAX_LAYERS, ComponentSpec, ModelSpec

ARCHITECTURE = "Gemma3ForCausalLM"
SLIDING, FULL = gemma2.SLIDING, gemma2.FULL
DEFAULT_PATTERN = 6  # Gemma3TextConfig's sliding_window_pattern when absent
GLOBAL_BASE, LOCAL_BASE = 1e6, 1e4  # Gemma3TextConfig.default_theta
LAYER_KEYS = ("layer_types", "sliding_window_pattern", "sliding_window", "rope_parameters", "rope_scaling",
              "rope_theta", "rope_local_base_freq", "partial_rotary_factor")


# ---------------------------------------------------------------- attention and head


def _attention(r: ConfigReader, document: Document, title: str) -> None:
    """[attention]'s query scale (query_pre_attn_scalar^-1/2); an attention softcap is refused."""
    cap = r.get("attn_logit_softcapping", float, None)
    if cap is not None:
        r.problem("attn_logit_softcapping", f"an attention logit softcap ({cap}) is not supported",
                  "transformers' Gemma 3 attention reads it but never caps its scores; expected null")
    scalar = r.get("query_pre_attn_scalar", float, 256.0)
    if scalar is not None and scalar <= 0:
        r.problem("query_pre_attn_scalar", f"expected a number > 0, found {scalar}")
    elif scalar is not None:
        document["attention"]["query_scale"] = scalar**-0.5


def _attention_json(spec: ModelSpec) -> dict[str, Any]:
    scale = spec.attention.config.query_scale
    return {"query_pre_attn_scalar": spec.model.head_dim if scale is None else round(scale**-2),
            "attn_logit_softcapping": None}


def _qk_norms(r: ConfigReader, document: Document, title: str) -> None:
    """q_norm and k_norm: Gemma3RMSNorm over head_dim, (1 + w), with rms_norm_eps (read before)."""
    document["attention"].update(qk_norm="head", qk_norm_eps=document["norm"]["eps"], qk_norm_offset=True)


def _head(r: ConfigReader, document: Document, title: str) -> None:
    cap = r.get("final_logit_softcapping", float, None)  # Gemma3TextConfig's default: none
    if cap is not None:
        document["head"]["logit_softcap"] = cap


# ---------------------------------------------------------------- the two RoPEs


def _rope_tables(r: ConfigReader) -> dict[str, dict[str, Any]]:
    """rope_parameters' table per layer type (transformers 5); any other key is one transformers ignores."""
    parameters, found = r.table("rope_parameters") or {}, {}
    for key, value in parameters.items():
        if key not in (FULL, SLIDING):
            r.problem(f"rope_parameters.{key}", "not a layer type", f"Gemma 3 reads rope_parameters.{FULL} and "
                      f".{SLIDING} (or rope_theta, rope_scaling, rope_local_base_freq); transformers ignores it")
        elif value is not None and not isinstance(value, dict):
            r.problem(f"rope_parameters.{key}", f"expected a table, found {type(value).__name__}")
        elif value:
            found[key] = value
    return found


def _sub_rope(r: ConfigReader, config: dict[str, Any], title: str, renames: dict[str, str]) -> dict[str, Any]:
    """The [positional] table of one layer type, read from ``config`` as rope(r) reads a whole config, its
    problems named at the keys of the file (``renames``: the reader's path -> the file's)."""
    sub = ConfigReader({key: value for key, value in config.items() if value is not None}, r.file)
    positional = llama_like.full_rope(sub, title)
    r.problems += [attrs.evolve(p, path=_renamed(p.path, renames)) for p in sub.problems]
    return positional


def _renamed(path: str | None, renames: dict[str, str]) -> str | None:
    old = next((old for old in renames if path is not None and (path == old or path.startswith(old + "."))), None)
    return path if old is None or path is None else renames[old] + path[len(old):]


def _global_rope(r: ConfigReader, tables: dict[str, Any], context: int | None, title: str) -> dict[str, Any]:
    """The full-attention layers' RoPE: rope_parameters.full_attention, or rope_theta and rope_scaling."""
    config = {"rope_parameters": tables.get(FULL), "max_position_embeddings": context,
              **{key: r.config.get(key) for key in ("rope_scaling", "rope_theta", "partial_rotary_factor")}}
    positional = _sub_rope(r, config, title, {"$.rope_parameters": f"$.rope_parameters.{FULL}"})
    given = [t.get("rope_theta") for t in (config["rope_parameters"], config["rope_scaling"]) if isinstance(t, dict)]
    if all(theta is None for theta in (*given, config["rope_theta"])):
        positional["base"] = GLOBAL_BASE
    return positional


def _local_rope(r: ConfigReader, tables: dict[str, Any], title: str) -> dict[str, Any]:
    """The sliding layers' RoPE: rope_parameters.sliding_attention, or rope_local_base_freq; unscaled."""
    at = f"$.rope_parameters.{SLIDING}"
    config = {"rope_parameters": tables.get(SLIDING), "rope_theta": r.config.get("rope_local_base_freq")}
    positional = _sub_rope(r, config, title, {"$.rope_parameters": at, "$.rope_theta": "$.rope_local_base_freq",
                                              "$.partial_rotary_factor": f"{at}.partial_rotary_factor"})
    scaling = positional.pop("scaling", None)
    if scaling is not None:
        r.problem(f"rope_parameters.{SLIDING}.rope_type", f"RoPE scaling {scaling!r} on the sliding layers is "
                  "not supported", "blockspec's Gemma 3 rotates its sliding layers unscaled, as transformers 4 did "
                  "(rope_local_base_freq alone)")
        positional = {key: value for key, value in positional.items() if key in ("use", "base", "layout")}
    if (config["rope_parameters"] or {}).get("rope_theta") is None and config["rope_theta"] is None:
        positional["base"] = LOCAL_BASE
    return positional


# ---------------------------------------------------------------- which layers slide


def _sliding(r: ConfigReader, n_layers: int) -> list[bool] | None:
    """Whether each layer slides: layer_types, else all but every sliding_window_pattern-th layer."""
    pattern = r.get("sliding_window_pattern", int, DEFAULT_PATTERN)
    if pattern is not None and pattern < 1:
        r.problem("sliding_window_pattern", f"expected a positive integer, found {pattern}")
        pattern = None
    derived = [(i + 1) % pattern != 0 for i in range(n_layers)] if pattern else None
    types = r.get("layer_types", list, None)
    if types is None:
        return derived
    if len(types) != n_layers or not all(kind in (SLIDING, FULL) for kind in types):  # entries of any type
        r.problem("layer_types", f"expected {n_layers} entries of {SLIDING!r} or {FULL!r}, found {types!r:.80}")
        return None
    given = [kind == SLIDING for kind in types]
    if r.config.get("sliding_window_pattern") is not None and derived is not None and given != derived:
        r.problem("sliding_window_pattern", f"{pattern} derives other global layers than layer_types lists",
                  "transformers 5 reads layer_types, transformers 4.50 the pattern: make them agree")
    return given


def _window(r: ConfigReader, sliding: list[bool]) -> int | None:
    window = llama_like.nullable(r, "sliding_window", int, 4096)
    if window is None and any(sliding) and not r.refused("sliding_window"):  # null, not refused as too wide
        r.problem("sliding_window", f"null, but layers are {SLIDING!r}", "transformers needs the window of those "
                  "layers")
    return window


# ---------------------------------------------------------------- the layers: read and write


def _read_layers(r: ConfigReader, document: Document, title: str) -> None:
    """[attention] and [positional] of the more common kind of layer, and [[layers]] rules for the others."""
    n_layers, tables = document["model"]["n_layers"], _rope_tables(r)
    ropes = {False: _global_rope(r, tables, document["model"]["context_length"], title),
             True: _local_rope(r, tables, title)}
    r.accept(*LAYER_KEYS)  # read above, or (a layer count refused) sizing nothing
    sliding = _sliding(r, n_layers) if n_layers is not None and 0 < n_layers <= MAX_LAYERS else None
    window = None if sliding is None else _window(r, sliding)
    if not sliding or window is None and any(sliding):
        document["positional"] = ropes[False]
        return
    attention = {False: dict(document["attention"]), True: {**document["attention"], "sliding_window": window}}
    common = Counter(sliding).most_common(1)[0][0]  # ties: layer 0's, the first seen
    document.update(attention=attention[common], positional=ropes[common])
    if not all(s == common for s in sliding):
        other = {"attention": {"sliding_window": window} if not common else attention[False],
                 **_positional_rule(ropes[not common], ropes[common])}
        document["layers"] = _rules(sliding, common, other)


def _rules(sliding: list[bool], common: bool, override: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules giving the layers of the other kind ``override``: one per offset of a repeating pattern
    (every/offset), else one listing them."""
    def rule(selector: dict[str, Any]) -> dict[str, Any]:
        return {**selector, **{table: dict(values) for table, values in override.items()}}

    p = gemma2.period(sliding)
    if p < len(sliding):
        return [rule({"every": p, "offset": j}) for j in range(p) if sliding[j] != common]
    return [rule({"index": [i for i, s in enumerate(sliding) if s != common]})]


def _positional_rule(table: dict[str, Any], model_wide: dict[str, Any]) -> dict[str, Any]:
    """A rule's positional: what differs from the model-wide table, or (a scaling to drop) a fresh table."""
    if any(key not in table for key in model_wide):
        return {"positional": table}
    changed = {key: value for key, value in table.items() if model_wide.get(key) != value}
    return {"positional": changed} if changed else {}


def _ropes(spec: ModelSpec) -> tuple[ComponentSpec, ComponentSpec]:
    """The full-attention layers' positional and the sliding ones' (a kind no layer has: the other's)."""
    windows = windows_of(spec)
    full = next((spec.layer(i).positional for i, w in enumerate(windows) if w is None), None)
    local = next((spec.layer(i).positional for i, w in enumerate(windows) if w is not None), None)
    full = full if full is not None else local if local is not None else spec.positional
    return full, local if local is not None else full


def _write_layers(spec: ModelSpec) -> dict[str, Any]:
    """layer_types (and, where it derives the same layers, sliding_window_pattern for transformers 4.50), the
    window, and both RoPEs, in transformers 5's rope_parameters and transformers 4's keys alike."""
    windows = windows_of(spec)
    found = gemma2.windows_json(spec)
    full_layers = [i for i, w in enumerate(windows) if w is None]
    if full_layers and full_layers == list(range(full_layers[0], len(windows), full_layers[0] + 1)):
        found["sliding_window_pattern"] = full_layers[0] + 1
    full, local = (positional.config for positional in _ropes(spec))
    written = rope_json(full)
    return {**found, "rope_theta": full.base, "rope_local_base_freq": local.base,
            "rope_scaling": written.get("rope_scaling"),
            "rope_parameters": {FULL: written["rope_parameters"], SLIDING: {"rope_type": "default",
                                                                            "rope_theta": local.base}}}


def _rope_misfits(spec: ModelSpec) -> list[str]:
    """Each kind's RoPE as the family writes it: the model-wide layout, every feature rotated, the sliding
    layers' unscaled."""
    problems, layout = [], getattr(spec.positional.config, "layout", "half")
    for kind, positional in zip(("full-attention", "sliding"), _ropes(spec)):
        config = positional.config
        if not rope_of(positional) or positional == spec.positional:
            continue  # not a RoPE (the component check's), or the model-wide one (checked as such)
        if getattr(config, "fraction", 1.0) != 1.0:
            problems.append(f"[[layers]] positional fraction = {config.fraction} on the {kind} layers: the family "
                            "rotates every feature of a head")
        if config.layout != layout:
            problems.append(f"[[layers]] positional layout = {config.layout!r} on the {kind} layers: the family's "
                            f"layers share the model-wide layout ({layout!r})")
    local = _ropes(spec)[1]
    if any(w is not None for w in windows_of(spec)) and getattr(local.config, "scaling", "none") != "none":
        problems.append(f"positional scaling = {local.config.scaling!r} on the sliding layers: the family's "
                        "sliding layers rotate unscaled (rope_local_base_freq)")
    return problems


# ---------------------------------------------------------------- the table

TABLE = gemma2.TABLE.without("rope_parameters", "sliding_window", "sliding_window_size").but(
    Key(name="query_pre_attn_scalar", read=_attention, write=_attention_json, misfits=gemma2.scale_misfits,
        expresses={"query_scale": True, "attention_softcap": False}),  # attn_logit_softcapping too
    Key(name="final_logit_softcapping", read=_head, expresses={"head_softcap": True},
        write=lambda spec: {"final_logit_softcapping": spec.head.config.logit_softcap}),
    Key(name="q_norm, k_norm", read=_qk_norms, expresses={"qk_norm": "head", "qk_norm_offset": True}),
    # layer_types, sliding_window_pattern, sliding_window and the two RoPEs' keys, read together
    Key(name="layer_types", read=_read_layers, write=_write_layers, misfits=_rope_misfits,
        expresses={"windows": "per_layer", "layer_rope": True}),
    # cache_implementation picks generate's cache class; _sliding_window_pattern, which transformers 5 writes
    # beside layer_types, it reads only to derive layer_types when they are absent, and they never are then
    accepted("cache_implementation"), accepted("_sliding_window_pattern"),
)

FAMILY = table_family(name="gemma3_text", title="Gemma 3", architecture=ARCHITECTURE, model_type="gemma3_text",
                      table=TABLE, rules=gemma2.rules, layer_index=llama_like.LAYER_INDEX, ignored=llama_like.ignored)
