"""StarCoder2 (Starcoder2ForCausalLM): the Llama-like keys (``llama_like.BASE``) for the Llama-like attention
(separate q/k/v, GQA, RoPE, a sliding window on every layer) with LayerNorm, a non-gated MLP c_fc ->
activation -> c_proj, and ``use_bias`` on every linear but the head (the LayerNorms always have a bias).
"""

from __future__ import annotations

from blockspec.spec.schema import ModelSpec
from blockspec.interop.config_reader import ConfigReader
from blockspec.interop.config_table import Document, Key, folded_dropout, mapped, norm_eps, table_family, tied
from blockspec.interop.families import llama_like
from blockspec.interop.families.gpt2 import activation_key
from blockspec.interop.weight_map import Rule, same

STARCODER2 = "Starcoder2ForCausalLM"
CONSTANT = {"mlp_type": "default", "norm_type": "layer_norm"}  # keys Starcoder2ForCausalLM never varies


def _constants(r: ConfigReader, document: Document, title: str) -> None:
    """mlp_type and norm_type of the original StarCoder2 configs: Starcoder2ForCausalLM always builds the
    default MLP and LayerNorm, so another value describes a model it does not build."""
    for key, expected in CONSTANT.items():
        value = r.get(key, str, expected)
        if value != expected and value is not None:
            r.problem(key, f"{value!r} is not supported", f"Starcoder2ForCausalLM builds only {expected!r}")


TABLE = llama_like.BASE.without("rms_norm_eps").but(
    tied(True), llama_like.head_dim(always=False),  # not a Starcoder2Config key; its attention reads it
    activation_key("hidden_act", "gelu_pytorch_tanh", tanh_name="gelu_pytorch_tanh"),
    norm_eps("norm_epsilon", "layernorm", 1e-5),
    Key(name="mlp_type", read=_constants, write=lambda spec: dict(CONSTANT)),  # norm_type too
    llama_like.sliding_window(None), mapped("use_bias", "model.bias", bool, True, biases="use_bias"),
    # dropout acts in training only, and blockspec has one rate for all of it (residual_dropout)
    mapped("residual_dropout", "model.dropout", float, 0.0), folded_dropout("attention_dropout"),
    folded_dropout("embedding_dropout"),
)


# ---------------------------------------------------------------- weights


def rules(spec: ModelSpec) -> list[Rule]:
    return llama_like.rules(spec, mlp=_mlp_rules)


def _mlp_rules(spec: ModelSpec, ours: str, theirs: str) -> list[Rule]:
    """c_fc and c_proj: a plain Linear each, as blockspec's ffn.up and ffn.down."""
    suffixes = ("weight", "bias") if spec.model.bias else ("weight",)
    return [same(f"{ours}.{mine}.{suffix}", f"{theirs}.{hf}.{suffix}")
            for mine, hf in (("up", "c_fc"), ("down", "c_proj")) for suffix in suffixes]


FAMILY = table_family(name="starcoder2", title="StarCoder2", architecture=STARCODER2, model_type="starcoder2",
                      table=TABLE, rules=rules, layer_index=llama_like.LAYER_INDEX, ignored=llama_like.ignored)
