"""The peers: the hand-written reference and Hugging Face, configured and weighted like the blockspec model."""

from __future__ import annotations

import torch
from torch import nn

import blockspec
from benchmarks.cases import reference_config
from benchmarks.reference import Reference


def build_reference(spec: blockspec.ModelSpec, weights: nn.Module | None = None) -> Reference:
    """The hand-written model; with ``weights`` (a blockspec model) it carries the same parameters."""
    model = Reference(reference_config(spec))
    if weights is not None:
        model.load_state_dict(weights.state_dict(), strict=True)
    return model


def build_hf(spec: blockspec.ModelSpec, family: str, weights: nn.Module | None = None) -> nn.Module:
    """GPT2LMHeadModel or LlamaForCausalLM with the spec's sizes, on PyTorch SDPA attention."""
    model = _hf_gpt2(spec) if family == "gpt2" else _hf_llama(spec)
    if weights is not None:
        missing, unexpected = model.load_state_dict(hf_state(weights, family), strict=False)
        leftover = [k for k in missing if k != "lm_head.weight"] + list(unexpected)
        if leftover:
            raise RuntimeError(f"weights do not map onto the Hugging Face model: {leftover[:5]}")
    return model.eval()


def hf_state(model: nn.Module, family: str) -> dict[str, torch.Tensor]:
    """The blockspec model's weights under Hugging Face names, through the interop weight map."""
    from blockspec.interop.families import family_named
    from blockspec.interop.weight_map import to_hf
    from blockspec.checkpoint.weights import unique_state

    return to_hf(family_named(family).rules(model.spec), unique_state(model))


def _hf_gpt2(spec: blockspec.ModelSpec) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    m, tanh = spec.model, spec.activation.config.approximate == "tanh"
    config = GPT2Config(
        vocab_size=m.vocab_size, n_positions=m.context_length, n_embd=m.d_model, n_layer=m.n_layers,
        n_head=m.n_heads, n_inner=m.d_ff, activation_function="gelu_new" if tanh else "gelu",
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=spec.norm.config.eps,
        bos_token_id=0, eos_token_id=0, tie_word_embeddings=True,
    )
    return GPT2LMHeadModel._from_config(config, attn_implementation="sdpa")


def _hf_llama(spec: blockspec.ModelSpec) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    m = spec.model
    config = LlamaConfig(
        vocab_size=m.vocab_size, hidden_size=m.d_model, intermediate_size=m.d_ff, num_hidden_layers=m.n_layers,
        num_attention_heads=m.n_heads, num_key_value_heads=m.kv_heads, max_position_embeddings=m.context_length,
        rms_norm_eps=spec.norm.config.eps, tie_word_embeddings=spec.head.config.tied,
        attention_bias=m.bias, mlp_bias=m.bias, bos_token_id=0, eos_token_id=0, pad_token_id=None,
    )
    return LlamaForCausalLM._from_config(config, attn_implementation="sdpa")
