"""Tiny models with adapters for the merge and PEFT-export tests: imported from random transformers models, or built.

Every adapter's own parameters are moved off their initial values (``trained``): a fresh LoRA's B is zero, and an
export that dropped or mis-split B would still give the base's logits.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

import blockspec  # noqa: E402
from blockspec.assembly.adapters import apply_adapters  # noqa: E402
from blockspec.interop import import_hf  # noqa: E402
from blockspec.modules.adapter import Adapter  # noqa: E402
from blockspec.spec.convert import spec_to_dict  # noqa: E402

from .weights_helpers import randomized  # noqa: E402

TOLERANCE = 1e-4  # PeftModel's and transformers' logits against blockspec's, relative to max(1, max |logits|)
IDS = torch.randint(0, 61, (2, 17), generator=torch.Generator().manual_seed(3))  # (B, N) below every vocab here


def gpt2_hf() -> torch.nn.Module:
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=48, vocab_size=61, bos_token_id=0,
                                     eos_token_id=0)
    return randomized(transformers.GPT2LMHeadModel(config))


def llama_hf() -> torch.nn.Module:
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64, vocab_size=61,
                                      bos_token_id=0, eos_token_id=0)
    return randomized(transformers.LlamaForCausalLM(config))


def neox_hf() -> torch.nn.Module:
    """GPT-NeoX: q, k, v fused per head (rows regrouped against blockspec's), half the head rotated."""
    config = transformers.GPTNeoXConfig(hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                        num_attention_heads=4, max_position_embeddings=64, vocab_size=61,
                                        rotary_pct=0.5, bos_token_id=0, eos_token_id=0)
    return randomized(transformers.GPTNeoXForCausalLM(config))


def imported(hf_model: torch.nn.Module, folder: Path, registry) -> blockspec.Transformer:
    """``hf_model`` saved to ``folder`` and imported: a blockspec model carrying its config.json."""
    hf_model.save_pretrained(folder)
    return import_hf(folder, registry=registry)


def with_adapters(model: blockspec.Transformer, registry, *entries: dict, seed: int = 1) -> blockspec.Transformer:
    """``model`` with ``entries`` as its [[adapters]], applied as a build applies them, and trained."""
    model.spec = blockspec.structure_spec({**spec_to_dict(model.spec), "adapters": list(entries)}, registry)
    apply_adapters(model, registry)
    return trained(model, seed)


def trained(model: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    """Every adapter's own parameters moved off their initial values, as fine-tuning would leave them."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, Adapter):
                for _, parameter in module.adapter_parameters():
                    parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    return model.eval()


def logits(model: torch.nn.Module, ids: torch.Tensor = IDS) -> torch.Tensor:
    with torch.no_grad():
        out = model.eval()(ids)
    return out.logits if hasattr(out, "logits") else out


def assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    bound = TOLERANCE * max(1.0, expected.abs().max().item())
    diff = (actual - expected).abs().max().item()
    assert diff <= bound, f"{what}: max |Δlogits| = {diff:.3g} > {bound:.3g}"
