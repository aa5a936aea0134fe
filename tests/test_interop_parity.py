"""Parity with the real ``transformers``: import, save/load, export, from_pretrained; same logits.

Models are tiny and randomly initialised here (no download: HF_HUB_OFFLINE=1). Every
parameter is randomised, norms and biases included, so a mis-mapped tensor cannot hide
behind an initial value of 0 or 1.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

from blockspec.checkpoint.directory import load, save  # noqa: E402
from blockspec.errors import CheckpointError  # noqa: E402
from blockspec.interop import export_hf, import_hf  # noqa: E402

from .weights_helpers import randomized  # noqa: E402

TOLERANCE = 1e-4
GPT2_CASES = {
    "tied-gelu_new-v97": dict(vocab_size=97),
    "untied-n_inner-v101": dict(vocab_size=101, tie_word_embeddings=False, n_inner=40,
                                activation_function="gelu_pytorch_tanh"),
    "tied-relu-eps-v50": dict(vocab_size=50, activation_function="relu", layer_norm_epsilon=1e-3),
}
LLAMA_CASES = {
    "mqa-untied-v97": dict(vocab_size=97, num_key_value_heads=1),
    "gqa2-tied-bias-v103": dict(vocab_size=103, num_key_value_heads=2, tie_word_embeddings=True,
                                attention_bias=True, mlp_bias=True, rope_theta=500000.0),
    "mha-untied-bias-v61": dict(vocab_size=61, num_key_value_heads=4, attention_bias=True, mlp_bias=True),
    "head_dim16-attention-bias-only-v67": dict(vocab_size=67, num_key_value_heads=2, head_dim=16, attention_bias=True),
    "mlp-bias-only-v59": dict(vocab_size=59, num_key_value_heads=2, mlp_bias=True),
}


def gpt2_model(**overrides):
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=48, bos_token_id=0,
                                     eos_token_id=0, **overrides)
    return randomized(transformers.GPT2LMHeadModel(config))


def llama_model(cls_name: str = "Llama", **overrides):
    config_cls = getattr(transformers, f"{cls_name}Config")
    model_cls = getattr(transformers, f"{cls_name}ForCausalLM")
    config = config_cls(hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                        max_position_embeddings=64, bos_token_id=0, eos_token_id=0, **overrides)
    return randomized(model_cls(config))


def ids_for(model) -> torch.Tensor:
    return torch.randint(0, model.config.vocab_size, (2, 17), generator=torch.Generator().manual_seed(3))


def logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        out = model.eval()(ids)  # blockspec's models, like HF's configs here, may have dropout
    return out.logits if hasattr(out, "logits") else out


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def round_trip(hf_model, tmp_path, registry) -> None:
    """HF -> blockspec -> checkpoint -> HF: logits within TOLERANCE at each step, tensors identical."""
    ids, source = ids_for(hf_model), tmp_path / "hf"
    hf_model.save_pretrained(source)
    expected = logits(hf_model, ids)
    imported = import_hf(source, registry=registry)
    assert max_diff(logits(imported, ids), expected) <= TOLERANCE
    reloaded = load(save(imported, tmp_path / "ckpt"), registry=registry)
    assert torch.equal(logits(reloaded, ids), logits(imported, ids))
    export_hf(reloaded, tmp_path / "export")
    back = type(hf_model).from_pretrained(tmp_path / "export").eval()
    assert max_diff(logits(back, ids), expected) <= TOLERANCE
    original, returned = hf_model.state_dict(), back.state_dict()
    assert original.keys() == returned.keys()
    assert [k for k in original if not torch.equal(original[k], returned[k])] == []


@pytest.mark.parametrize("case", GPT2_CASES)
def test_gpt2_parity_and_round_trip(case, tmp_path, registry):
    round_trip(gpt2_model(**GPT2_CASES[case]), tmp_path, registry)


@pytest.mark.parametrize("case", LLAMA_CASES)
def test_llama_parity_and_round_trip(case, tmp_path, registry):
    round_trip(llama_model(**LLAMA_CASES[case]), tmp_path, registry)


def test_mistral_without_sliding_window_imports_and_exports_as_llama(tmp_path, registry):
    mistral = llama_model("Mistral", vocab_size=89, num_key_value_heads=2, sliding_window=None)
    ids = ids_for(mistral)
    mistral.save_pretrained(tmp_path / "hf")
    imported = import_hf(tmp_path / "hf", registry=registry)
    assert max_diff(logits(imported, ids), logits(mistral, ids)) <= TOLERANCE
    export_hf(imported, tmp_path / "export")
    llama = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "export").eval()
    assert max_diff(logits(llama, ids), logits(mistral, ids)) <= TOLERANCE


def rewrite_config(directory, change) -> None:
    path = directory / "config.json"
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def test_old_transformers_config_keys_import_the_same_model(tmp_path, registry):
    """Configs written by older transformers: rope_theta at the top level, rope_scaling null, n_ctx."""
    llama, gpt2 = llama_model(vocab_size=97, rope_theta=20000.0), gpt2_model(vocab_size=97)
    llama.save_pretrained(tmp_path / "llama")
    gpt2.save_pretrained(tmp_path / "gpt2")

    def old_llama(config):
        theta = config.pop("rope_parameters", {}).get("rope_theta", config.get("rope_theta"))
        config.pop("head_dim", None)
        return {**config, "rope_theta": theta, "rope_scaling": None, "torch_dtype": "float32"}

    def old_gpt2(config):
        return {**config, "n_ctx": config.pop("n_positions")}

    rewrite_config(tmp_path / "llama", old_llama)
    rewrite_config(tmp_path / "gpt2", old_gpt2)
    for hf_model, name in ((llama, "llama"), (gpt2, "gpt2")):
        ids = ids_for(hf_model)
        imported = import_hf(tmp_path / name, registry=registry)
        assert max_diff(logits(imported, ids), logits(hf_model, ids)) <= TOLERANCE
    assert import_hf(tmp_path / "llama", registry=registry).spec.positional.config.base == 20000.0


def test_gpt2_checkpoint_without_transformer_prefix_and_with_mask_buffers(tmp_path, registry):
    """The original 'gpt2' files were saved from GPT2Model: no 'transformer.' prefix, attn.bias buffers."""
    from safetensors.torch import save_file

    hf_model = gpt2_model(vocab_size=97)
    hf_model.save_pretrained(tmp_path)
    state = {k.removeprefix("transformer."): v.contiguous() for k, v in hf_model.state_dict().items()
             if k != "lm_head.weight"}
    state["h.0.attn.bias"] = torch.ones(1, 1, 48, 48).tril()
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    ids = ids_for(hf_model)
    assert max_diff(logits(import_hf(tmp_path, registry=registry), ids), logits(hf_model, ids)) <= TOLERANCE


def test_sharded_safetensors_import(tmp_path, registry):
    hf_model = llama_model(vocab_size=97, num_key_value_heads=2)
    hf_model.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    ids = ids_for(hf_model)
    assert max_diff(logits(import_hf(tmp_path, registry=registry), ids), logits(hf_model, ids)) <= TOLERANCE


def test_pytorch_model_bin_needs_an_explicit_opt_in(tmp_path, registry):
    hf_model = gpt2_model(vocab_size=97)
    hf_model.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    torch.save(hf_model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="is a pickle.*allow_pickle=True"):
        import_hf(tmp_path, registry=registry)
    ids = ids_for(hf_model)
    imported = import_hf(tmp_path, registry=registry, allow_pickle=True)
    assert max_diff(logits(imported, ids), logits(hf_model, ids)) <= TOLERANCE


def test_an_interleaved_rope_model_exports_with_permuted_qk(tmp_path, registry):
    import blockspec

    from .weights_helpers import llama_spec

    model = randomized(blockspec.build(llama_spec(registry, kv=2, layout="interleaved"), registry=registry), seed=4)
    export_hf(model, tmp_path)
    hf_model = transformers.LlamaForCausalLM.from_pretrained(tmp_path).eval()
    ids = ids_for(hf_model)
    assert max_diff(logits(hf_model, ids), logits(model, ids)) <= TOLERANCE
