"""Hugging Face config.json <-> blockspec spec dict, for GPT-2 and the Llama family.

Reads the keys as real checkpoints have them, written by old and new ``transformers``
alike (``rope_theta`` at the top level or inside ``rope_parameters``; ``n_ctx`` beside
``n_positions``). Anything the blockspec model would compute differently (RoPE scaling,
a sliding window that bites, another activation) is refused with the key that says so:
a silently different model is worse than no import.
"""

from __future__ import annotations

from typing import Any

from blockspec.errors import CheckpointError, Problem
from blockspec.spec.schema import ModelSpec

GPT2 = "GPT2LMHeadModel"
LLAMA = "LlamaForCausalLM"
MISTRAL = "MistralForCausalLM"
ARCHITECTURES = {GPT2: "gpt2", LLAMA: "llama", MISTRAL: "llama"}
MODEL_TYPES = {"gpt2": GPT2, "llama": LLAMA, "mistral": MISTRAL}
GPT2_ACTIVATIONS = {  # activation_function -> blockspec activation table
    "gelu_new": {"use": "gelu", "approximate": "tanh"},
    "gelu_pytorch_tanh": {"use": "gelu", "approximate": "tanh"},
    "gelu_fast": {"use": "gelu", "approximate": "tanh"},
    "gelu": {"use": "gelu", "approximate": "none"},
    "relu": {"use": "relu"},
    "silu": {"use": "silu"},
    "swish": {"use": "silu"},
}
_MISSING = object()


class _Reader:
    """Typed access to config keys; each problem is kept, all are raised together."""

    def __init__(self, config: dict[str, Any], file: str) -> None:
        self.config, self.file = config, file
        self.problems: list[Problem] = []

    def get(self, key: str, kind: type, default: Any = _MISSING, *, aliases: tuple[str, ...] = ()) -> Any:
        for name in (key, *aliases):
            value = self.config.get(name)
            if value is not None:
                return self._typed(name, value, kind)
        if default is _MISSING:
            self.problem(key, "missing required key")
        return None if default is _MISSING else default

    def _typed(self, key: str, value: Any, kind: type) -> Any:
        ok = isinstance(value, (int, float)) and type(value) is not bool if kind is float else type(value) is kind
        if not ok:
            self.problem(key, f"expected {kind.__name__}, found {type(value).__name__} {value!r:.40}")
            return None
        return float(value) if kind is float else value

    def problem(self, key: str, message: str, hint: str | None = None) -> None:
        self.problems.append(Problem(file=self.file, path=f"$.{key}", message=message, hint=hint))

    def raise_problems(self) -> None:
        if self.problems:
            raise CheckpointError("\n".join(str(p) for p in self.problems))


def architecture(config: dict[str, Any], file: str) -> str:
    """The supported architecture a config describes, from ``architectures`` or ``model_type``."""
    listed = config.get("architectures")
    names = listed if isinstance(listed, list) and listed else [MODEL_TYPES.get(config.get("model_type"))]
    supported = ", ".join(ARCHITECTURES)
    if len(names) != 1 or not isinstance(names[0], str) or names[0] not in ARCHITECTURES:
        found = listed if listed else f"model_type {config.get('model_type')!r}"
        raise CheckpointError(str(Problem(file=file, path="$.architectures",
                                          message=f"unsupported architecture {found!r:.80}",
                                          hint=f"blockspec imports {supported}")))
    return names[0]


def spec_dict(config: dict[str, Any], *, file: str, name: str) -> dict[str, Any]:
    """config.json (as a dict) -> a blockspec spec dict, or CheckpointError listing every problem."""
    arch = architecture(config, file)
    reader = _Reader(config, file)
    document = _gpt2(reader, name) if ARCHITECTURES[arch] == "gpt2" else _llama(reader, name)
    reader.raise_problems()
    return document


# ---------------------------------------------------------------- GPT-2


def _gpt2(r: _Reader, name: str) -> dict[str, Any]:
    d_model = r.get("n_embd", int, aliases=("hidden_size",))
    activation = r.get("activation_function", str, "gelu_new")
    if activation not in GPT2_ACTIVATIONS and activation is not None:
        r.problem("activation_function", f"unsupported activation {activation!r}",
                  f"supported: {', '.join(GPT2_ACTIVATIONS)}")
    _gpt2_refusals(r)
    d_ff = r.get("n_inner", int, None)
    model = {
        "name": name, "vocab_size": r.get("vocab_size", int), "d_model": d_model,
        "context_length": r.get("n_positions", int, aliases=("n_ctx", "max_position_embeddings")),
        "n_layers": r.get("n_layer", int, aliases=("num_hidden_layers",)),
        "n_heads": r.get("n_head", int, aliases=("num_attention_heads",)),
        "d_ff": d_ff if d_ff is not None else 4 * (d_model or 0), "bias": True, "norm_placement": "pre",
        "dropout": r.get("resid_pdrop", float, 0.1),  # transformers' default
    }
    return {
        "model": model, "positional": {"use": "learned"},
        "norm": {"use": "layernorm", "eps": r.get("layer_norm_epsilon", float, 1e-5)},
        "activation": dict(GPT2_ACTIVATIONS.get(activation, {"use": "gelu"})),
        "head": {"use": "lm", "tied": r.get("tie_word_embeddings", bool, True)},
        "attention": {"use": "causal"},
    }


def _gpt2_refusals(r: _Reader) -> None:
    if r.get("scale_attn_weights", bool, True) is False:
        r.problem("scale_attn_weights", "unscaled attention scores are not supported", "expected true")
    if r.get("scale_attn_by_inverse_layer_idx", bool, False):
        r.problem("scale_attn_by_inverse_layer_idx", "per-layer score scaling is not supported", "expected false")
    if r.get("add_cross_attention", bool, False):
        r.problem("add_cross_attention", "cross-attention is not supported", "expected false")


# ---------------------------------------------------------------- Llama, Mistral


def _llama(r: _Reader, name: str) -> dict[str, Any]:
    d_model, n_heads = r.get("hidden_size", int), r.get("num_attention_heads", int)
    attention_bias, mlp_bias = r.get("attention_bias", bool, False), r.get("mlp_bias", bool, False)
    if attention_bias != mlp_bias:
        r.problem("mlp_bias", f"attention_bias = {attention_bias} but mlp_bias = {mlp_bias}",
                  "blockspec has one bias flag for attention and FFN linears")
    _llama_refusals(r, d_model, n_heads)
    model = {
        "name": name, "vocab_size": r.get("vocab_size", int), "d_model": d_model,
        "context_length": r.get("max_position_embeddings", int),
        "n_layers": r.get("num_hidden_layers", int), "n_heads": n_heads,
        "n_kv_heads": r.get("num_key_value_heads", int, n_heads), "d_ff": r.get("intermediate_size", int),
        "bias": attention_bias, "norm_placement": "pre", "dropout": r.get("attention_dropout", float, 0.0),
    }
    return {
        "model": model, "positional": {"use": "rope", "base": _rope_theta(r), "layout": "half"},
        "norm": {"use": "rmsnorm", "eps": r.get("rms_norm_eps", float, 1e-6)},
        "activation": {"use": "swiglu"},
        "head": {"use": "lm", "tied": r.get("tie_word_embeddings", bool, False)},
        "attention": {"use": "causal"},
    }


def _llama_refusals(r: _Reader, d_model: int | None, n_heads: int | None) -> None:
    act = r.get("hidden_act", str, "silu")
    if act not in ("silu", "swish", None):
        r.problem("hidden_act", f"unsupported activation {act!r}", "blockspec's swiglu gates with silu")
    head_dim = r.get("head_dim", int, None)
    if head_dim is not None and d_model and n_heads and head_dim != d_model // n_heads:
        r.problem("head_dim", f"expected hidden_size / num_attention_heads = {d_model // n_heads}, found {head_dim}",
                  "blockspec derives head_dim from d_model and n_heads")
    window, max_positions = r.get("sliding_window", int, None), r.get("max_position_embeddings", int, None)
    if window is not None and r.get("use_sliding_window", bool, True) and max_positions and window < max_positions:
        r.problem("sliding_window", f"sliding-window attention ({window} < max_position_embeddings = "
                  f"{max_positions}) is not supported", "blockspec attention is full causal attention")
    factor = r.get("partial_rotary_factor", float, 1.0)
    if factor != 1.0:
        r.problem("partial_rotary_factor", f"partial RoPE (factor {factor}) is not supported", "expected 1.0")


def _rope_theta(r: _Reader) -> float:
    """rope_theta from new-style rope_parameters or old-style top-level keys; scaling refused."""
    parameters = r.config.get("rope_parameters")
    scaling = r.config.get("rope_scaling")
    for key, table in (("rope_parameters", parameters), ("rope_scaling", scaling)):
        if table is None:
            continue
        if not isinstance(table, dict):
            r.problem(key, f"expected a table, found {type(table).__name__}")
            continue
        kind = table.get("rope_type", table.get("type", "default"))
        if kind != "default":
            r.problem(f"{key}.rope_type", f"RoPE scaling {kind!r} is not supported",
                      "blockspec's rope has no scaling; only rope_type 'default' imports")
        if table.get("partial_rotary_factor", 1.0) != 1.0:
            r.problem(f"{key}.partial_rotary_factor", "partial RoPE is not supported", "expected 1.0")
    if isinstance(parameters, dict) and parameters.get("rope_theta") is not None:
        theta = _Reader(parameters, r.file)
        value = theta.get("rope_theta", float)
        r.problems += [Problem(file=p.file, path="$.rope_parameters" + p.path[1:], message=p.message)
                       for p in theta.problems]
        return value if value is not None else 10000.0
    return r.get("rope_theta", float, 10000.0)


# ---------------------------------------------------------------- export


def hf_config(spec: ModelSpec, family: str, *, dtype: str, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config.json of an exported model; keys of ``base`` (the imported original) are kept
    when they do not describe the architecture (token ids, generation settings)."""
    ours = _gpt2_config(spec) if family == "gpt2" else _llama_config(spec)
    kept = dict(base or {}) if _family_of(base) == family else {}
    for stale in ("rope_scaling", "rope_parameters", "rope_theta", "head_dim", "sliding_window", "n_ctx"):
        kept.pop(stale, None)
    return {**kept, **ours, "dtype": dtype, "torch_dtype": dtype}


def _family_of(base: dict[str, Any] | None) -> str | None:
    names = (base or {}).get("architectures") or [None]
    return ARCHITECTURES.get(names[0]) if isinstance(names, list) and isinstance(names[0], str) else None


def _gpt2_config(spec: ModelSpec) -> dict[str, Any]:
    m, act = spec.model, spec.activation
    function = {"relu": "relu", "silu": "silu"}.get(act.name) or (
        "gelu_new" if getattr(act.config, "approximate", "none") == "tanh" else "gelu")
    return {
        "architectures": [GPT2], "model_type": "gpt2", "vocab_size": m.vocab_size, "n_positions": m.context_length,
        "n_ctx": m.context_length, "n_embd": m.d_model, "n_layer": m.n_layers, "n_head": m.n_heads,
        "n_inner": m.d_ff, "activation_function": function, "layer_norm_epsilon": spec.norm.config.eps,
        "resid_pdrop": m.dropout, "embd_pdrop": m.dropout, "attn_pdrop": m.dropout,
        "tie_word_embeddings": spec.head.config.tied, "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "add_cross_attention": False,
    }


def _llama_config(spec: ModelSpec) -> dict[str, Any]:
    m = spec.model
    theta = spec.positional.config.base
    return {
        "architectures": [LLAMA], "model_type": "llama", "vocab_size": m.vocab_size, "hidden_size": m.d_model,
        "intermediate_size": m.d_ff, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
        "num_key_value_heads": m.kv_heads, "head_dim": m.head_dim, "hidden_act": "silu",
        "max_position_embeddings": m.context_length, "rms_norm_eps": spec.norm.config.eps,
        "rope_theta": theta, "rope_parameters": {"rope_type": "default", "rope_theta": theta},
        "attention_bias": m.bias, "mlp_bias": m.bias, "attention_dropout": m.dropout,
        "tie_word_embeddings": spec.head.config.tied,
    }
