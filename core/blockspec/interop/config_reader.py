"""Typed reading of a Hugging Face config.json, and key readers several families share.

A family's ``spec_dict`` reads every key through a ``ConfigReader`` and records, with
``problem``, each key it cannot honour; all problems are raised together, each at its key.
The reader remembers which keys were read: a key no family read and nobody declared inert
(``accept``) is refused by ``refuse_unread``, so nothing in a config.json is silently ignored.
"""

from __future__ import annotations

from typing import Any

from blockspec.errors import CheckpointError, Problem

_MISSING = object()

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

    def get(self, key: str, kind: type, default: Any = _MISSING, *, aliases: tuple[str, ...] = ()) -> Any:
        self.read.update((key, *aliases))
        for name in (key, *aliases):
            value = self.config.get(name)
            if value is not None:
                return self._typed(name, value, kind)
        if default is _MISSING:
            self.problem(key, "missing required key")
        return None if default is _MISSING else default

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
        return float(value) if kind is float else value

    def problem(self, key: str, message: str, hint: str | None = None) -> None:
        self.problems.append(Problem(file=self.file, path=f"$.{key}", message=message, hint=hint))

    def refuse_unread(self, family: str) -> None:
        """A problem for each set key that neither the family read nor INERT lists."""
        for key in sorted(k for k, v in self.config.items() if v is not None and k not in self.read | INERT):
            self.problem(key, f"unknown {family} config key", "blockspec cannot tell whether it changes the "
                         "model; remove it if it does not")

    def raise_problems(self) -> None:
        if self.problems:
            raise CheckpointError("\n".join(str(p) for p in self.problems))


def rope(r: ConfigReader) -> dict[str, Any]:
    """The [positional] table of a rotary family: base from new-style ``rope_parameters`` or old-style
    top-level keys, the rotated fraction from ``partial_rotary_factor`` (either place), scaling refused."""
    parameters, scaling = r.table("rope_parameters"), r.table("rope_scaling")
    for key, table in (("rope_parameters", parameters), ("rope_scaling", scaling)):
        if table is None:
            continue
        kind = table.get("rope_type", table.get("type", "default"))
        if kind != "default":
            r.problem(f"{key}.rope_type", f"RoPE scaling {kind!r} is not supported",
                      "blockspec's rope has no scaling; only rope_type 'default' imports")
    fraction = _sub(r, parameters, "partial_rotary_factor", None)
    fraction = fraction if fraction is not None else r.get("partial_rotary_factor", float, 1.0)
    theta, top = _sub(r, parameters, "rope_theta", None), r.get("rope_theta", float, None)
    if theta is not None and top is not None and theta != top:
        r.problem("rope_theta", f"{top} differs from rope_parameters.rope_theta = {theta}", "keep one of them")
    base = theta if theta is not None else top if top is not None else 10000.0
    positional: dict[str, Any] = {"use": "rope", "base": base, "layout": "half"}
    if fraction != 1.0:
        positional["fraction"] = fraction
    return positional


def _sub(r: ConfigReader, table: dict[str, Any] | None, key: str, default: Any) -> Any:
    """A float from a sub-table (rope_parameters), its problems reported under the table's path."""
    if table is None or table.get(key) is None:
        return default
    inner = ConfigReader(table, r.file)
    value = inner.get(key, float)
    r.problems += [Problem(file=p.file, path="$.rope_parameters" + p.path[1:], message=p.message)
                   for p in inner.problems]
    return value if value is not None else default


def rope_theta(r: ConfigReader) -> float:
    """The rope base alone (kept for families that read nothing else of the rope)."""
    return rope(r)["base"]


def rope_json(positional: Any) -> dict[str, Any]:
    """The config.json keys of a rope [positional] config: written new-style (``rope_parameters``) and
    old-style (top-level ``rope_theta``), so transformers old and new read the same base."""
    parameters: dict[str, Any] = {"rope_type": "default", "rope_theta": positional.base}
    if getattr(positional, "fraction", 1.0) != 1.0:
        parameters["partial_rotary_factor"] = positional.fraction
    return {"rope_theta": positional.base, "rope_parameters": parameters}
