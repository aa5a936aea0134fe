"""Typed reading of a Hugging Face config.json, and key readers several families share.

A family's ``spec_dict`` reads every key through a ``ConfigReader`` and records, with
``problem``, each key it cannot honour; all problems are raised together, each at its key.
The reader remembers which keys were read: a key no family read and nobody declared inert
(``accept``) is refused by ``refuse_unread``, so nothing in a config.json is silently ignored.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from blockspec.errors import CheckpointError, Problem
from blockspec.spec.schema import MAX_LAYERS

REQUIRED = object()  # the default of a key that must be given: absent is a problem

# The largest value each size key may hold (its older names too; a list: its length), checked as the key is
# read, so nothing is ever sized by a larger one (a per-layer list, the model on the meta device, a table of
# positions), and a refusal names the key the file gave. Far above every published model of the families
# (Llama 3.1 405B: 126 layers, width 16,384, 128 heads; Gemma 3: 262,144 tokens; Qwen2.5-1M: 1,010,000
# positions). Positions are held tightest: a rotary or sinusoidal table holds context_length rows as soon as the
# model is built, which no weights file bounds (2^24 positions: 4 GiB for a 32-wide toy).
SIZE_BOUNDS: dict[str, int] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "layer_types"), MAX_LAYERS),
    **dict.fromkeys(("hidden_size", "n_embd"), 1 << 17),
    **dict.fromkeys(("intermediate_size", "n_inner"), 1 << 20),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_key_value_heads", "num_local_experts",
                     "num_experts_per_tok"), 1 << 12),
    "head_dim": 1 << 14,
    "vocab_size": 1 << 24,
    **dict.fromkeys(("max_position_embeddings", "n_positions", "n_ctx", "original_max_position_embeddings",
                     "sliding_window"), 1 << 20),
}

# Keys every transformers config may carry that do not change what the model computes: bookkeeping,
# generation defaults (generate's settings, not the model's), token ids and initialisation.
INERT = frozenset({
    "_name_or_path", "architectures", "model_type", "dtype", "torch_dtype", "transformers_version", "id2label",
    "label2id", "problem_type", "output_attentions", "output_hidden_states", "return_dict", "use_return_dict",
    "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "use_cache", "initializer_range",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "tokenizer_class", "prefix", "task_specific_params", "finetuning_task", "tf_legacy_loss", "use_bfloat16",
    "torchscript", "pruned_heads", "tie_encoder_decoder", "cross_attention_hidden_size", "max_length",
    "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens", "gradient_checkpointing",
    "auto_map", "output_router_logits", "_attn_implementation_autoset", "attn_implementation",
})


class ConfigReader:
    """Typed access to config keys; each problem is kept, all are raised together."""

    def __init__(self, config: dict[str, Any], file: str) -> None:
        self.config, self.file = config, file
        self.problems: list[Problem] = []
        self.read: set[str] = set()
        self.oversized: set[str] = set()  # size keys refused (each once), which ``get`` then reads as None
        for key, value in config.items():  # every size key, read, shadowed by a newer name or inert alike
            self._check_bound(key, value)

    def get(self, key: str, kind: type, default: Any = REQUIRED, *, aliases: tuple[str, ...] = ()) -> Any:
        self.read.update((key, *aliases))
        for name in (key, *aliases):
            value = self.config.get(name)
            if value is not None:
                return self._typed(name, value, kind)
        if default is REQUIRED:
            self.problem(key, "missing required key")
        return None if default is REQUIRED else default

    def table(self, key: str) -> dict[str, Any] | None:
        """A sub-table (``rope_parameters``), or None when absent or null; a non-table is a problem."""
        self.read.add(key)
        value = self.config.get(key)
        if value is not None and not isinstance(value, dict):
            self.problem(key, f"expected a table, found {type(value).__name__}")
            return None
        return value

    def accept(self, *keys: str) -> None:
        """Declare keys read that do not change the computation (dropout rates of an eval-only path, ...)."""
        self.read.update(keys)

    def _typed(self, key: str, value: Any, kind: type) -> Any:
        ok = isinstance(value, (int, float)) and type(value) is not bool if kind is float else type(value) is kind
        if not ok:
            self.problem(key, f"expected {kind.__name__}, found {type(value).__name__} {value!r:.40}")
            return None
        if key in self.oversized:
            return None
        return float(value) if kind is float else value

    def _check_bound(self, key: str, value: Any) -> None:
        """A problem if a size key's value (a list: its length) lies outside [0, SIZE_BOUNDS[key]]."""
        bound, size = SIZE_BOUNDS.get(key), len(value) if isinstance(value, list) else value
        if bound is None or not isinstance(size, int) or 0 <= size <= bound:
            return
        self.oversized.add(key)
        what = "at most {bound:,} entries" if isinstance(value, list) else f"an integer from 0 to {bound:,}"
        self.problem(key, f"expected {what.format(bound=bound)}, found {size:,}",
                     "far above any published model: is it a typo?")

    def refused(self, key: str) -> bool:
        """Whether a problem names ``key`` already (a problem derived from its refusal would name it twice)."""
        return any(problem.path == f"$.{key}" for problem in self.problems)

    def problem(self, key: str, message: str, hint: str | None = None) -> None:
        self.problems.append(Problem(file=self.file, path=f"$.{key}", message=message, hint=hint))

    def refuse_unread(self, family: str) -> None:
        """A problem for each set key that neither the family read nor INERT lists."""
        for key in sorted(k for k, v in self.config.items()
                          if v is not None and k not in self.read | INERT | self.oversized):
            self.problem(key, f"unknown {family} config key", "blockspec cannot tell whether it changes the "
                         "model; remove it if it does not")

    def raise_problems(self) -> None:
        if self.problems:
            raise CheckpointError(self.problems)


# rope_type -> the keys transformers reads from its table for it, besides the type, rope_theta and
# partial_rotary_factor (modeling_rope_utils: _compute_*_parameters and _validate_*_rope_parameters)
ROPE_TYPES: dict[str, tuple[str, ...]] = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
    "yarn": ("factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale",
             "mscale_all_dim", "truncate"),
}
# longrope: read only for the families whose parity with transformers is tested with it (rope(longrope=True))
LONGROPE_KEYS = ("short_factor", "long_factor", "original_max_position_embeddings", "attention_factor", "factor")
# [positional] option -> its rope_parameters key
ROPE_OPTION_KEYS = {"factor": "factor", "original_context_length": "original_max_position_embeddings",
                    "low_freq_factor": "low_freq_factor", "high_freq_factor": "high_freq_factor",
                    "attention_factor": "attention_factor", "beta_fast": "beta_fast", "beta_slow": "beta_slow",
                    "truncate": "truncate", "short_factor": "short_factor", "long_factor": "long_factor"}


def rope(r: ConfigReader, renamed: dict[str, str] | None = None, longrope: bool = False) -> dict[str, Any]:
    """The [positional] table of a rotary family, read from the table transformers reads: ``rope_scaling``
    (old layout, type under ``type`` or ``rope_type``) when set, since it then replaces ``rope_parameters``
    (transformers 5's layout), else ``rope_parameters``. Every key of it is read for its rope_type or
    refused at its path; the base may also sit at the top level (``rope_theta``), and so may the rotated
    fraction (``partial_rotary_factor``). ``renamed``: types a family reads as another (Phi-3: 'su' as
    'longrope'); ``longrope``: the family reads that type too."""
    name, table = _rope_table(r)
    sub = ConfigReader(table, r.file)
    types = {**ROPE_TYPES, "longrope": LONGROPE_KEYS} if longrope else ROPE_TYPES
    kind = _rope_type(sub, renamed or {}, types)
    fraction = sub.get("partial_rotary_factor", float, None)
    fraction = fraction if fraction is not None else r.get("partial_rotary_factor", float, 1.0)
    positional: dict[str, Any] = {"use": "rope", "base": _rope_base(r, sub, name), "layout": "half"}
    if fraction != 1.0:
        positional["fraction"] = fraction
    if kind in types and kind != "default":
        positional.update(_rope_scaling(r, sub, name, kind))
    unread = {key for key, value in table.items() if value is not None} - sub.read if kind in types else ()
    reads = ", ".join(types.get(kind, ())) or "no other key"
    for key in sorted(unread):
        sub.problem(key, f"unknown key for rope_type {kind!r}",
                    f"transformers reads {reads} for it; blockspec cannot tell what this one was meant to change")
    _rope_problems(r, sub, name)
    if name == "rope_scaling":
        _rope_tables_agree(r, table, positional, kind)
    return positional


def _rope_table(r: ConfigReader) -> tuple[str, dict[str, Any]]:
    """The table transformers reads and its key: rope_scaling when set and not empty, else rope_parameters."""
    parameters, scaling = r.table("rope_parameters"), r.table("rope_scaling")
    return ("rope_scaling", scaling) if scaling else ("rope_parameters", parameters or {})


def _rope_type(sub: ConfigReader, renamed: dict[str, str], types: dict[str, tuple[str, ...]]) -> str:
    """The table's rope_type (old: type; both must agree), "default" when absent; unsupported ones refused."""
    given = {key: sub.get(key, str, None) for key in ("rope_type", "type")}
    named = {key: renamed.get(kind, kind) for key, kind in given.items() if kind is not None}
    if len(set(named.values())) > 1:
        sub.problem("type", f"{named['type']!r} differs from rope_type {named['rope_type']!r}", "keep one of them")
    key, kind = next(iter(named.items()), ("rope_type", "default"))
    if kind not in types:
        names = list(types)
        sub.problem(key, f"RoPE scaling {kind!r} is not supported",
                    f"blockspec's rope imports rope_type {', '.join(names[:-1])} and {names[-1]}")
    return kind


def _rope_base(r: ConfigReader, sub: ConfigReader, name: str) -> float:
    """rope_theta from the table, or the top level, or 10000; the two places must agree."""
    theta, top = sub.get("rope_theta", float, None), r.get("rope_theta", float, None)
    if theta is not None and top is not None and theta != top:
        r.problem("rope_theta", f"{top} differs from {name}.rope_theta = {theta}", "keep one of them")
    return theta if theta is not None else top if top is not None else 10000.0


def _rope_scaling(r: ConfigReader, sub: ConfigReader, name: str, kind: str) -> dict[str, Any]:
    """The [positional] scaling options of a linear, dynamic, llama3, yarn or longrope table."""
    if kind == "longrope":
        return _longrope_options(r, sub, name)
    found: dict[str, Any] = {"scaling": kind, "factor": sub.get("factor", float)}
    if kind in ("llama3", "yarn"):
        found["original_context_length"] = _original_length(r, sub, name)
    if kind == "llama3":
        found.update(low_freq_factor=sub.get("low_freq_factor", float),
                     high_freq_factor=sub.get("high_freq_factor", float))
    if kind == "yarn":
        found.update(_yarn_options(sub, found["factor"]))
    return {key: value for key, value in found.items() if value is not None}


def _original_length(r: ConfigReader, sub: ConfigReader, name: str) -> int | None:
    """original_max_position_embeddings: transformers prefers a top-level one to the table's, and falls
    back to max_position_embeddings; a top-level one that differs from the table's is refused."""
    inside = sub.get("original_max_position_embeddings", int, None)
    top = r.get("original_max_position_embeddings", int, None)
    if top is not None and inside is not None and top != inside:
        r.problem("original_max_position_embeddings", f"{top} differs from {name}.original_max_position_embeddings"
                  f" = {inside}", "transformers uses the top-level one; keep one of them")
    found = top if top is not None else inside
    return found if found is not None else r.get("max_position_embeddings", int, None)


def _yarn_options(sub: ConfigReader, factor: float | None) -> dict[str, Any]:
    """attention_factor as transformers resolves it (given; else from mscale / mscale_all_dim when both are
    set and not zero; else left to the default 0.1·ln(factor) + 1), the betas (0 or absent: the default)."""
    attention = sub.get("attention_factor", float, None)
    mscale, mscale_all_dim = sub.get("mscale", float, None), sub.get("mscale_all_dim", float, None)
    if attention is None and mscale and mscale_all_dim and factor is not None:
        attention = _mscale(factor, mscale) / _mscale(factor, mscale_all_dim)
    return {"attention_factor": attention, "beta_fast": sub.get("beta_fast", float, None) or None,
            "beta_slow": sub.get("beta_slow", float, None) or None, "truncate": sub.get("truncate", bool, None)}


def _longrope_options(r: ConfigReader, sub: ConfigReader, name: str) -> dict[str, Any]:
    """The factor lists and the original length; a given factor (rather than max_position_embeddings /
    original) sets the attention factor as transformers derives it, sqrt(1 + ln(factor)/ln(original))."""
    found: dict[str, Any] = {"scaling": "longrope", "short_factor": _factors(sub, "short_factor"),
                             "long_factor": _factors(sub, "long_factor"),
                             "original_context_length": _original_length(r, sub, name),
                             "attention_factor": sub.get("attention_factor", float, None)}
    factor, length = sub.get("factor", float, None), found["original_context_length"]
    if found["attention_factor"] is None and factor is not None and length is not None and length >= 2:
        found["attention_factor"] = math.sqrt(1 + math.log(factor) / math.log(length)) if factor > 1 else 1.0
    return {key: value for key, value in found.items() if value is not None}


def _factors(sub: ConfigReader, key: str) -> tuple[float, ...] | None:
    """A list of numbers as a tuple of floats; anything else a problem at the key."""
    value = sub.get(key, list)
    if value is None or all(isinstance(v, (int, float)) and type(v) is not bool for v in value):
        return None if value is None else tuple(float(v) for v in value)
    sub.problem(key, f"expected a list of numbers, found {value!r:.60}")
    return None


def _mscale(factor: float, mscale: float) -> float:
    return 0.1 * mscale * math.log(factor) + 1.0 if factor > 1 else 1.0


def _rope_problems(r: ConfigReader, sub: ConfigReader, name: str) -> None:
    """The table's problems, moved under its key: $.rope_parameters.factor."""
    r.problems += [attrs.evolve(p, path=f"$.{name}" + p.path[1:]) for p in sub.problems]


def _rope_tables_agree(r: ConfigReader, scaling: dict[str, Any], positional: dict[str, Any], kind: str) -> None:
    """rope_parameters beside rope_scaling is ignored by transformers (rope_scaling replaces it), so it
    must say the same: each of its keys equals what was read (its type, base, fraction or rope_scaling's key)."""
    parameters = r.config.get("rope_parameters") or {}
    read = {"rope_type": kind, "type": kind, "rope_theta": positional["base"],
            "partial_rotary_factor": positional.get("fraction", 1.0)}
    for key, value in sorted(parameters.items()) if isinstance(parameters, dict) else ():
        expected = read[key] if key in read else scaling.get(key)
        if value != expected:
            r.problem(f"rope_parameters.{key}", f"{value!r} differs from what transformers reads, rope_scaling's "
                      f"{expected!r}", "transformers reads rope_scaling when both are set: make them agree")


def rope_theta(r: ConfigReader) -> float:
    """The rope base alone, for families whose rotary embedding has no scaling: a scaling is refused."""
    positional = rope(r)
    if positional.get("scaling", "none") != "none":
        name, _ = _rope_table(r)
        r.problem(f"{name}.rope_type", f"RoPE scaling {positional['scaling']!r} is not supported by this family",
                  "only rope_type 'default' imports")
    return positional["base"]


def rope_json(positional: Any) -> dict[str, Any]:
    """The config.json keys of a rope [positional] config, new layout (``rope_parameters``) and old (top-level
    ``rope_theta``; a scaling also as ``rope_scaling``, under the type key of the first transformers release
    that read it), so transformers old and new compute the same frequencies."""
    parameters: dict[str, Any] = {"rope_type": "default", "rope_theta": positional.base}
    if getattr(positional, "fraction", 1.0) != 1.0:
        parameters["partial_rotary_factor"] = positional.fraction
    kind, options = _scaling_json(positional)
    if kind == "none":
        return {"rope_theta": positional.base, "rope_parameters": parameters}
    old = {"type" if kind in ("linear", "dynamic") else "rope_type": kind, **options}
    if "partial_rotary_factor" in parameters:  # rope_scaling replaces rope_parameters in transformers 5
        old["partial_rotary_factor"] = parameters["partial_rotary_factor"]
    return {"rope_theta": positional.base, "rope_parameters": {**parameters, "rope_type": kind, **options},
            "rope_scaling": old}


def _scaling_json(positional: Any) -> tuple[str, dict[str, Any]]:
    """The scaling type and its set options under their rope_parameters keys; llama3's defaults written out,
    since transformers requires them."""
    kind = getattr(positional, "scaling", "none")
    options = {key: list(value) if isinstance(value, tuple) else value for option, key in ROPE_OPTION_KEYS.items()
               if (value := getattr(positional, option, None)) is not None and value != ()}
    if kind == "llama3":
        options = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, **options}
    return kind, options
