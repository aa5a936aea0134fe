"""StarCoder2 (Starcoder2ForCausalLM): the Llama-like attention (separate q/k/v, GQA, RoPE, a sliding window
on every layer) with LayerNorm, a non-gated MLP c_fc -> activation -> c_proj, and ``use_bias`` on every
linear but the head (the LayerNorms always have a bias).
"""

from __future__ import annotations

from typing import Any

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader, rope_json
from blockspec.interop.family import Expresses, Family
from blockspec.interop.families import llama_like
from blockspec.interop.families.gpt2 import ACTIVATIONS
from blockspec.interop.weight_map import Rule, same

STARCODER2 = "Starcoder2ForCausalLM"
CONSTANT = {"mlp_type": "default", "norm_type": "layer_norm"}  # keys Starcoder2ForCausalLM never varies


# ---------------------------------------------------------------- config.json -> spec


def spec_dict(r: ConfigReader, name: str) -> dict[str, Any]:
    model = llama_like.sizes(r, name)
    model.update(bias=r.get("use_bias", bool, True), dropout=r.get("residual_dropout", float, 0.0))
    llama_like.read_head_dim(r, model)  # not a Starcoder2Config key, but its attention reads it when given
    # dropout acts in training only, and blockspec has one rate for all of it (residual_dropout above)
    r.accept("attention_dropout", "embedding_dropout")
    _constants(r)
    window = llama_like.window_key(r, None)
    return llama_like.document(
        model, positional=llama_like.full_rope(r, "StarCoder2"),
        norm={"use": "layernorm", "eps": r.get("norm_epsilon", float, 1e-5)}, activation=_activation(r),
        tied=r.get("tie_word_embeddings", bool, True),
        attention=llama_like.window_attention(window),
    )


def _activation(r: ConfigReader) -> dict[str, Any]:
    act = r.get("hidden_act", str, "gelu_pytorch_tanh")
    if act not in ACTIVATIONS and act is not None:
        r.problem("hidden_act", f"unsupported activation {act!r}", f"supported: {', '.join(ACTIVATIONS)}")
    return dict(ACTIVATIONS.get(act, ACTIVATIONS["gelu_pytorch_tanh"]))


def _constants(r: ConfigReader) -> None:
    """mlp_type and norm_type of the original StarCoder2 configs: Starcoder2ForCausalLM always builds the
    default MLP and LayerNorm, so another value describes a model it does not build."""
    for key, expected in CONSTANT.items():
        value = r.get(key, str, expected)
        if value != expected and value is not None:
            r.problem(key, f"{value!r} is not supported", f"Starcoder2ForCausalLM builds only {expected!r}")


# ---------------------------------------------------------------- spec -> config.json


EXPRESSES = Expresses(norm="layernorm", activations=("gelu", "relu", "silu"), biases="use_bias",
                      windows="all", head_dim=True)


def config_json(spec: ModelSpec) -> dict[str, Any]:
    m = spec.model
    return {
        "architectures": [STARCODER2], "model_type": "starcoder2", **llama_like.size_keys(spec),
        **llama_like.given_head_dim(spec), "hidden_act": _hidden_act(spec), "norm_epsilon": spec.norm.config.eps,
        **rope_json(spec.positional.config), **CONSTANT, **llama_like.window_json(spec), "use_bias": m.bias,
        "attention_dropout": m.dropout, "residual_dropout": m.dropout, "embedding_dropout": m.dropout,
    }


def _hidden_act(spec: ModelSpec) -> str:
    act = spec.activation
    if act.name != "gelu":
        return act.name
    return "gelu_pytorch_tanh" if getattr(act.config, "approximate", "none") == "tanh" else "gelu"


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec) -> list[Rule]:
    return llama_like.rules(spec, mlp=_mlp_rules)


def _mlp_rules(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    """c_fc and c_proj: a plain Linear each, as blockspec's ffn.up and ffn.down."""
    suffixes = ("weight", "bias") if spec.model.bias else ("weight",)
    return [same(f"{ours}.{mine}.{suffix}", f"{theirs}.{hf}.{suffix}")
            for mine, hf in (("up", "c_fc"), ("down", "c_proj")) for suffix in suffixes]


FAMILY = Family(
    name="starcoder2", title="StarCoder2", architectures={STARCODER2: "starcoder2"}, spec_dict=spec_dict,
    misfits=EXPRESSES.misfits, config_json=config_json, rules=rules, layer_index=llama_like.LAYER_INDEX,
    ignored=llama_like.ignored,
)
