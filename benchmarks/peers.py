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
        state = (_gpt2_state if family == "gpt2" else _llama_state)(weights.state_dict(), spec)
        missing, unexpected = model.load_state_dict(state, strict=False)
        leftover = [k for k in missing if k != "lm_head.weight"] + list(unexpected)
        if leftover:
            raise RuntimeError(f"weights do not map onto the Hugging Face model: {leftover[:5]}")
    return model.eval()


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


def _gpt2_state(state: dict[str, torch.Tensor], spec: blockspec.ModelSpec) -> dict[str, torch.Tensor]:
    """blockspec names -> GPT2LMHeadModel names; GPT-2's Conv1D stores (in, out), hence the transposes."""
    out = {"transformer.wte.weight": state["embedding.weight"],
           "transformer.wpe.weight": state["positional.table.weight"],
           "transformer.ln_f.weight": state["final_norm.weight"], "transformer.ln_f.bias": state["final_norm.bias"]}
    for i in range(spec.model.n_layers):
        src, dst = f"blocks.{i}.", f"transformer.h.{i}."
        for a, b in (("norm1", "ln_1"), ("norm2", "ln_2")):
            out[f"{dst}{b}.weight"], out[f"{dst}{b}.bias"] = state[f"{src}{a}.weight"], state[f"{src}{a}.bias"]
        for a, b in (("attn.qkv", "attn.c_attn"), ("attn.proj", "attn.c_proj"),
                     ("ffn.up", "mlp.c_fc"), ("ffn.down", "mlp.c_proj")):
            out[f"{dst}{b}.weight"] = state[f"{src}{a}.weight"].t().contiguous()  # (in, out)
            out[f"{dst}{b}.bias"] = state[f"{src}{a}.bias"]
    return out


def _llama_state(state: dict[str, torch.Tensor], spec: blockspec.ModelSpec) -> dict[str, torch.Tensor]:
    """blockspec names -> LlamaForCausalLM names; fused qkv and gate|up are split."""
    m = spec.model
    out = {"model.embed_tokens.weight": state["embedding.weight"], "model.norm.weight": state["final_norm.weight"],
           "lm_head.weight": state["head.weight"]}
    kv_width = m.kv_heads * m.head_dim
    for i in range(m.n_layers):
        src, dst = f"blocks.{i}.", f"model.layers.{i}."
        q, k, v = state[f"{src}attn.qkv.weight"].split((m.d_model, kv_width, kv_width))
        gate, up = state[f"{src}ffn.up.weight"].chunk(2)
        out.update({
            f"{dst}input_layernorm.weight": state[f"{src}norm1.weight"],
            f"{dst}post_attention_layernorm.weight": state[f"{src}norm2.weight"],
            f"{dst}self_attn.q_proj.weight": q, f"{dst}self_attn.k_proj.weight": k,
            f"{dst}self_attn.v_proj.weight": v, f"{dst}self_attn.o_proj.weight": state[f"{src}attn.proj.weight"],
            f"{dst}mlp.gate_proj.weight": gate, f"{dst}mlp.up_proj.weight": up,
            f"{dst}mlp.down_proj.weight": state[f"{src}ffn.down.weight"],
        })
    return out
