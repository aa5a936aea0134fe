"""Weights keep their meaning (issue 22, item 7): no tensor is cast across kinds on its way into a model.

Integers, booleans and complex numbers are refused where a floating tensor is expected, naming the file,
the tensor, what was expected and what was found, on every path that reads weights: a checkpoint, a
weights file, a Hugging Face directory (safetensors and pickle), a training state, and a training
checkpoint's optimizer state and RNG state. float8 is floating: its values are exact in any wider float,
so it is read into one (a model is never built in float8, which cannot compute).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import blockspec
from blockspec.checkpoint.directory import load, save
from blockspec.checkpoint.weights import tied_aliases
from blockspec.checkpoint.weights_file import load_weights
from blockspec.cli import main
from blockspec.errors import CheckpointError
from blockspec.interop import export_hf, import_hf
from blockspec.train.state import load_model_state

from ..corpus import small_play
from ..specs import spec_text
from ..weights_helpers import edit_weights, gpt2_spec, randomized, resign
from ..cli_run import run

NOT_FLOATING = {torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}
FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)
NORM = "blocks.0.norm1.weight"  # a parameter whose values (near 1) an integer cast would keep plausible
MICRO = spec_text(name="micro", vocab_size=64, context_length=32, d_model=32, n_layers=2, n_heads=4, d_ff=64)
TRAIN = ["--batch-size", "4", "--eval-batches", "1", "--eval-every", "0", "--device", "cpu", "--quiet"]


def as_kind(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (tensor > 0.5).to(dtype) if dtype == torch.bool else tensor.round().to(dtype)


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("blockspec: error: "), err
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def model(registry) -> torch.nn.Module:
    return randomized(blockspec.build(gpt2_spec(registry), registry=registry, seed=0))


@pytest.fixture
def hf(model, tmp_path) -> Path:
    return export_hf(model, tmp_path / "hf")


@pytest.fixture
def checkpoint(model, tmp_path) -> Path:
    return save(model, tmp_path / "ckpt")


# ---------------------------------------------------------------- a Hugging Face directory


@pytest.mark.parametrize("dtype", sorted(NOT_FLOATING, key=str), ids=str)
def test_a_hugging_face_import_refuses_a_non_floating_weight(capsys, hf, tmp_path, dtype):
    weights = hf / "model.safetensors"
    tensors = load_file(weights)
    tensors["transformer.h.0.ln_1.weight"] = as_kind(tensors["transformer.h.0.ln_1.weight"], dtype)
    save_file(tensors, weights)
    with pytest.raises(CheckpointError) as caught:
        import_hf(hf)
    assert str(caught.value) == (f"{hf}: tensor 'transformer.h.0.ln_1.weight' (-> {NORM}): expected a floating "
                                 f"dtype like float32, found {str(dtype).removeprefix('torch.')}")
    code, _, err = run(capsys, "import-hf", hf, "--out", tmp_path / "ck")
    assert code == 2 and "transformer.h.0.ln_1.weight" in one_error_line(err)
    assert not (tmp_path / "ck").exists()


def test_an_integer_part_of_a_concatenated_weight_is_refused_before_promotion(registry, tmp_path):
    """Llama's q, k and v are concatenated into one qkv: torch.cat would promote an integer q to float."""
    from ..weights_helpers import llama_spec

    directory = export_hf(randomized(blockspec.build(llama_spec(registry), registry=registry)), tmp_path / "hf")
    weights = directory / "model.safetensors"
    tensors = load_file(weights)
    name = "model.layers.0.self_attn.q_proj.weight"
    tensors[name] = as_kind(tensors[name] * 10, torch.int32)
    save_file(tensors, weights)
    with pytest.raises(CheckpointError, match=rf"tensor '{name}' \(-> blocks.0.attn.qkv.weight\): expected a "
                                              "floating dtype like float32, found int32"):
        import_hf(directory)


def test_a_pickled_hugging_face_import_refuses_complex_weights(hf):
    tensors = load_file(hf / "model.safetensors")
    (hf / "model.safetensors").unlink()
    tensors["transformer.wte.weight"] = tensors["transformer.wte.weight"].to(torch.complex64)
    torch.save(tensors, hf / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"hf: tensor 'transformer.wte.weight' \(-> embedding.weight\): "
                                              "expected a floating dtype like float32, found complex64$"):
        import_hf(hf, allow_pickle=True)


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_a_float8_hugging_face_model_is_read_exactly_into_float32(hf, dtype):
    weights = hf / "model.safetensors"
    tensors = {name: tensor.to(dtype) for name, tensor in load_file(weights).items()}
    save_file(tensors, weights)
    imported = import_hf(hf).eval()
    assert {p.dtype for p in imported.parameters()} == {torch.float32}
    assert torch.equal(imported.state_dict()[NORM], tensors["transformer.h.0.ln_1.weight"].float())
    assert torch.isfinite(imported(torch.tensor([[1, 2, 3]]))).all()


# ---------------------------------------------------------------- a checkpoint and a weights file


@pytest.mark.parametrize("dtype", sorted(NOT_FLOATING, key=str), ids=str)
def test_a_checkpoint_refuses_a_non_floating_weight(checkpoint, dtype):
    edit_weights(checkpoint, lambda state: {**state, NORM: as_kind(state[NORM], dtype)})
    resign(checkpoint)  # as a forger would: the manifest agrees with the file
    with pytest.raises(CheckpointError) as caught:
        load(checkpoint)
    assert str(caught.value) == (f"{checkpoint / 'model.safetensors'}: tensor '{NORM}': expected a floating dtype "
                                 f"like float32, found {NOT_FLOATING[dtype]}")


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_a_float8_checkpoint_loads_exactly_into_float32_and_runs(capsys, checkpoint, dtype):
    edit_weights(checkpoint, lambda state: {name: tensor.to(dtype) for name, tensor in state.items()})
    resign(checkpoint)
    loaded = load(checkpoint).eval()
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    assert torch.equal(loaded.state_dict()[NORM], load_file(checkpoint / "model.safetensors")[NORM].float())
    code, _, err = run(capsys, "trace", checkpoint, "--ids", "1,2,3")
    assert code == 0, err


@pytest.mark.parametrize("dtype", sorted(NOT_FLOATING, key=str), ids=str)
def test_a_weights_file_refuses_a_non_floating_weight(model, tmp_path, dtype):
    path = tmp_path / "weights.safetensors"
    state = {n: t.detach() for n, t in model.state_dict().items() if n not in tied_aliases(model)}
    save_file({**state, NORM: as_kind(state[NORM], dtype)}, path)
    target = randomized(blockspec.build(model.spec, seed=1), seed=1)
    before = {n: t.clone() for n, t in target.state_dict().items()}
    with pytest.raises(CheckpointError, match=rf"weights.safetensors: tensor '{NORM}': expected a floating dtype "
                                              rf"like float32, found {NOT_FLOATING[dtype]}$"):
        load_weights(target, path)
    assert all(torch.equal(before[n], t) for n, t in target.state_dict().items())  # nothing half-filled


# ---------------------------------------------------------------- a training state


@pytest.mark.parametrize("dtype", [*sorted(NOT_FLOATING, key=str), torch.complex64], ids=str)
def test_a_training_state_refuses_a_non_floating_tensor(model, dtype):
    target = randomized(blockspec.build(model.spec, seed=1), seed=1)
    state = {n: t.detach().clone() for n, t in model.state_dict().items() if n not in tied_aliases(model)}
    state[NORM] = as_kind(state[NORM], dtype) if dtype != torch.complex64 else state[NORM].to(dtype)
    found = str(dtype).removeprefix("torch.")
    with pytest.raises(CheckpointError, match=rf"^the resumed checkpoint: tensor '{NORM}': expected a floating "
                                              rf"dtype like float32, found {found}$"):
        load_model_state(target, state, source="the resumed checkpoint")


# ---------------------------------------------------------------- a training checkpoint's optimizer and RNG


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """A micro checkpoint trained one step, and its text."""
    folder = tmp_path_factory.mktemp("trained")
    (folder / "micro.toml").write_text(MICRO)
    (folder / "play.txt").write_text(small_play(100))
    assert main(["train", str(folder / "micro.toml"), "--data", str(folder / "play.txt"), "--steps", "1",
                 "--out", str(folder / "ckpt"), *TRAIN]) == 0
    return folder / "ckpt", folder / "play.txt"


def forged_training_checkpoint(trained, tmp_path, change) -> Path:
    source, _ = trained
    forged = tmp_path / "forged"
    shutil.copytree(source, forged)
    optimizer = forged / "optimizer.safetensors"
    save_file(change(load_file(optimizer)), optimizer, metadata={"format": "pt"})
    resign(forged)
    return forged


EXP_AVG = "state/blocks.0.attn.qkv.weight/exp_avg"
STEP = EXP_AVG.replace("exp_avg", "step")
OPTIMIZER_FAULTS = {
    "integer moment": (lambda s: {**s, EXP_AVG: as_kind(s[EXP_AVG] * 1e4, torch.int64)},
                       f"tensor '{EXP_AVG}': expected a floating dtype like float32, found int64"),
    "boolean moment": (lambda s: {**s, EXP_AVG: as_kind(s[EXP_AVG], torch.bool)},
                       f"tensor '{EXP_AVG}': expected a floating dtype like float32, found bool"),
    "mis-shaped moment": (lambda s: {**s, EXP_AVG: s[EXP_AVG][:1]},
                          f"tensor '{EXP_AVG}': expected shape [96, 32] (the parameter's), found [1, 32]"),
    "step of many values": (lambda s: {**s, STEP: torch.ones(3)},
                            f"tensor '{STEP}': expected a step count (one finite number >= 0), found shape [3]"),
    "boolean step": (lambda s: {**s, STEP: torch.tensor(True)},
                     f"tensor '{STEP}': expected a step count (one finite number >= 0), found bool"),
    "NaN step": (lambda s: {**s, STEP: torch.tensor(float("nan"))},
                 f"tensor '{STEP}': expected a step count (one finite number >= 0), found nan"),
    "float RNG state": (lambda s: {**s, "rng/cpu": s["rng/cpu"].float()},
                        "tensor 'rng/cpu': expected the CPU generator's state, uint8 of shape [5056], "
                        "found float32 of shape [5056]"),
    "short RNG state": (lambda s: {**s, "rng/cpu": s["rng/cpu"][:100]},
                        "tensor 'rng/cpu': expected the CPU generator's state, uint8 of shape [5056], "
                        "found uint8 of shape [100]"),
}


@pytest.mark.parametrize("fault", sorted(OPTIMIZER_FAULTS))
def test_resuming_refuses_an_optimizer_state_that_does_not_fit(capsys, trained, tmp_path, fault):
    change, expected = OPTIMIZER_FAULTS[fault]
    forged = forged_training_checkpoint(trained, tmp_path, change)
    before = snapshot(forged)
    _, data = trained
    code, out, err = run(capsys, "train", forged, "--resume", forged, "--data", data, "--steps", "2",
                         "--out", forged, "--force", *TRAIN)
    line = one_error_line(err)
    assert code == 2 and out == "", err
    assert line == f"blockspec: error: {forged / 'optimizer.safetensors'}: {expected}"
    assert snapshot(forged) == before  # the previous good output, byte for byte


def test_a_genuine_optimizer_state_still_resumes(capsys, trained, tmp_path):
    forged = forged_training_checkpoint(trained, tmp_path, lambda state: state)
    _, data = trained
    code, _, err = run(capsys, "train", forged, "--resume", forged, "--data", data, "--steps", "2",
                       "--out", tmp_path / "next", *TRAIN)
    assert code == 0, err
    assert json.loads((tmp_path / "next" / "training.json").read_text())["step"] == 2
