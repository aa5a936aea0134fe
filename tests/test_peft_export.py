"""``blockspec export-peft`` (issue 26, item 4): PEFT is the client.

``PeftModel.from_pretrained(base, DIR)``, on the base ``export-peft --base`` (``export-hf`` of the model without
its adapters) writes, must give blockspec's logits to 1e-4: GPT-2's fused Conv1D c_attn with LoRA and DoRA,
Llama's q/k/v and gate/up, which blockspec fuses and PEFT keeps apart, GPT-NeoX's query_key_value, whose rows are
regrouped, and an interleaved-RoPE model whose q and k rows move on export. Adapter weights are trained off their
initial values first (B starts at zero).
"""

from __future__ import annotations

import json

import pytest
import torch

import blockspec
from blockspec.checkpoint.directory import save
from blockspec.cli import main
from blockspec.errors import InputError
from blockspec.interop.peft_export import peft_modules

from .adapter_helpers import assert_close, gpt2_hf, imported, llama_hf, logits, neox_hf, with_adapters
from .weights_helpers import llama_spec

peft = pytest.importorskip("peft")

GPT2 = ({"use": "{use}", "targets": ["@attention"], "rank": 4, "alpha": 6.0},
        {"use": "{use}", "targets": ["blocks.1.ffn.up"], "rank": 2, "alpha": 8.0})
LLAMA = ({"use": "{use}", "targets": ["@attention", "blocks.0.ffn.up"], "rank": 4, "alpha": 6.0},
         {"use": "{use}", "targets": ["blocks.1.ffn.down"], "rank": 2})
CASES = {"gpt2-lora": (gpt2_hf, GPT2, "lora"), "gpt2-dora": (gpt2_hf, GPT2, "dora"),
         "llama-lora": (llama_hf, LLAMA, "lora"), "llama-dora": (llama_hf, LLAMA, "dora"),
         "neox-dora": (neox_hf, LLAMA, "dora")}


def entries(template: tuple[dict, ...], use: str) -> list[dict]:
    return [{**entry, "use": use} for entry in template]


def exported(model, tmp_path, capsys) -> tuple[torch.nn.Module, dict, dict]:
    """``model`` saved, exported with ``export-peft --base``, and loaded by PEFT onto the base: (PeftModel,
    adapter_config.json, the saved tensors' shapes)."""
    from safetensors.torch import load_file

    save(model, tmp_path / "adapted")
    code = main(["export-peft", str(tmp_path / "adapted"), "--out", str(tmp_path / "peft"),
                 "--base", str(tmp_path / "base")])
    assert code == 0, capsys.readouterr().err
    base = blockspec_free_base(tmp_path / "base")
    config = json.loads((tmp_path / "peft" / "adapter_config.json").read_text())
    shapes = {k: tuple(t.shape) for k, t in load_file(tmp_path / "peft" / "adapter_model.safetensors").items()}
    return peft.PeftModel.from_pretrained(base, tmp_path / "peft").eval(), config, shapes


def blockspec_free_base(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder).eval()


@pytest.mark.parametrize("case", sorted(CASES))
def test_peft_on_the_exported_base_gives_blockspecs_logits(registry, tmp_path, capsys, case):
    make, template, use = CASES[case]
    model = with_adapters(imported(make(), tmp_path / "hf", registry), registry, *entries(template, use))
    theirs, config, _ = exported(model, tmp_path, capsys)
    assert config["use_dora"] == (use == "dora") and config["r"] == 4 and config["lora_alpha"] == 6.0
    assert_close(logits(theirs), logits(model), f"PeftModel ({case})")
    unadapted = blockspec_free_base(tmp_path / "base")
    assert (logits(unadapted) - logits(model)).abs().max() > 1e-2  # the adapters change the logits: B is not zero


def test_gpt2s_conv1d_keeps_peft_s_shapes_and_says_fan_in_fan_out(registry, tmp_path, capsys):
    model = with_adapters(imported(gpt2_hf(), tmp_path / "hf", registry), registry, *entries(GPT2, "dora"))
    _, config, shapes = exported(model, tmp_path, capsys)
    prefix = "base_model.model.transformer.h.0.attn.c_attn."
    assert shapes[prefix + "lora_A.weight"] == (4, 32) and shapes[prefix + "lora_B.weight"] == (96, 4)
    assert shapes[prefix + "lora_magnitude_vector"] == (96,)
    assert config["fan_in_fan_out"] is True and config["task_type"] == "CAUSAL_LM"
    assert config["rank_pattern"] == {"transformer.h.1.mlp.c_fc": 2}
    assert config["alpha_pattern"] == {"transformer.h.1.mlp.c_fc": 8.0}
    assert len(shapes) == 3 * 5 and all(k.startswith("base_model.model.transformer.h.") for k in shapes)


def test_llamas_fused_qkv_becomes_three_loras_sharing_a(registry, tmp_path):
    model = with_adapters(imported(llama_hf(), tmp_path / "hf", registry), registry, *entries(LLAMA, "lora"))
    found = {m.name: m for m in peft_modules(model)}
    q, k, v = (found[f"model.layers.0.self_attn.{p}_proj"] for p in "qkv")
    assert all(torch.equal(m.tensors["lora_A.weight"], q.tensors["lora_A.weight"]) for m in (k, v))
    b = torch.cat([m.tensors["lora_B.weight"] for m in (q, k, v)])  # (32 + 16 + 16, r): back to qkv's rows
    assert torch.equal(b, model.get_submodule("blocks.0.attn.qkv").lora_B.weight)
    assert {"model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"} <= found.keys()
    assert found["model.layers.1.mlp.down_proj"].rank == 2 and not q.transposed


def test_an_interleaved_rope_model_exports_its_rows_in_hugging_faces_order(registry, tmp_path, capsys):
    model = blockspec.build(llama_spec(registry, layout="interleaved"), registry=registry, seed=0)
    model = with_adapters(model, registry, {"use": "dora", "targets": ["@attention"], "rank": 4})
    theirs, _, _ = exported(model, tmp_path, capsys)
    assert_close(logits(theirs), logits(model), "PeftModel (interleaved RoPE)")


@pytest.mark.parametrize("second, message", [
    ({"use": "lora", "targets": ["blocks.1.attn.qkv"]},
     "blocks.1.attn.qkv has lora and blocks.0.attn.qkv dora: PEFT's use_dora holds for every module of one adapter"),
    ({"use": "dora", "targets": ["blocks.1.attn.qkv"], "dropout": 0.1},
     "blocks.1.attn.qkv has dropout 0.1 and blocks.0.attn.qkv 0: PEFT's lora_dropout is one rate for every module "
     "of one adapter"),
])
def test_what_one_lora_config_cannot_say_is_one_line_naming_the_module(registry, tmp_path, capsys, second, message):
    model = with_adapters(imported(gpt2_hf(), tmp_path / "hf", registry), registry,
                          {"use": "dora", "targets": ["blocks.0.attn.qkv"]}, second)
    with pytest.raises(InputError) as caught:
        peft_modules(model)
    assert str(caught.value) == f"<spec>: $.adapters: {message}"
    save(model, tmp_path / "adapted")
    capsys.readouterr()
    assert main(["export-peft", str(tmp_path / "adapted"), "--out", str(tmp_path / "peft")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and not (tmp_path / "peft").exists()


def test_a_source_without_adapters_and_an_existing_folder_are_refused(registry, tmp_path, capsys):
    save(imported(gpt2_hf(), tmp_path / "hf", registry), tmp_path / "plain")
    capsys.readouterr()
    assert main(["export-peft", str(tmp_path / "plain"), "--out", str(tmp_path / "peft")]) == 2
    assert capsys.readouterr().err == (f"blockspec: error: {tmp_path / 'plain'}: $.adapters: expected [[adapters]] to "
                                       "export, found none; export the plain model with blockspec export-hf\n")
    model = with_adapters(imported(gpt2_hf(), tmp_path / "hf2", registry), registry, *entries(GPT2, "lora"))
    save(model, tmp_path / "adapted")
    capsys.readouterr()
    for out in (tmp_path / "hf", tmp_path / "adapted"):  # a model folder, the source itself: never replaced
        assert main(["export-peft", str(tmp_path / "adapted"), "--out", str(out), "--force"]) == 2
        assert capsys.readouterr().err.count("\n") == 1
    assert main(["export-peft", str(tmp_path / "adapted"), "--out", str(tmp_path / "peft")]) == 0
    assert main(["export-peft", str(tmp_path / "adapted"), "--out", str(tmp_path / "peft")]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["export-peft", str(tmp_path / "adapted"), "--out", str(tmp_path / "peft"), "--force", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["modules"][0] == "transformer.h.0.attn.c_attn"


def test_a_lora_fine_tune_of_an_imported_gpt2_merges_and_exports_with_blockspecs_logits(registry, tmp_path, capsys):
    """The issue's acceptance run: 50 steps of an imported GPT-2-shaped model with LoRA on its attention, then
    merged and exported for transformers, and exported for PEFT onto the exported base; same logits each way."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from blockspec.checkpoint.directory import load

    from .corpus import small_play
    from .weights_helpers import randomized

    hf = randomized(GPT2LMHeadModel(GPT2Config(n_embd=128, n_layer=2, n_head=4, n_positions=48, vocab_size=1000,
                                               bos_token_id=0, eos_token_id=0)))
    hf.save_pretrained(tmp_path / "hf")
    assert main(["import-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "base")]) == 0
    (tmp_path / "lora.toml").write_text('[[adapters]]\nuse = "lora"\ntargets = ["@attention"]\nrank = 4\nalpha = 8.0\n')
    (tmp_path / "play.txt").write_text(small_play(), encoding="utf-8")
    assert main(["train", str(tmp_path / "base"), "--adapters", str(tmp_path / "lora.toml"), "--data",
                 str(tmp_path / "play.txt"), "--steps", "50", "--batch-size", "4", "--eval-batches", "1",
                 "--eval-every", "0", "--lr", "1e-2", "--out", str(tmp_path / "tuned"), "--quiet"]) == 0
    size = {name: sum(f.stat().st_size for f in (tmp_path / name).rglob("*") if f.is_file()) for name in ("base", "tuned")}
    assert not (tmp_path / "tuned" / "model.safetensors").exists() and size["tuned"] < 0.05 * size["base"], size
    tuned = load(tmp_path / "tuned")
    assert main(["merge", str(tmp_path / "tuned"), "--out", str(tmp_path / "merged")]) == 0
    assert main(["export-hf", str(tmp_path / "merged"), "--out", str(tmp_path / "merged-hf")]) == 0
    assert_close(logits(GPT2LMHeadModel.from_pretrained(tmp_path / "merged-hf")), logits(tuned), "merged, exported")
    theirs, _, _ = exported(tuned, tmp_path / "peft-run", capsys)
    assert_close(logits(theirs), logits(tuned), "PeftModel on the exported base")
