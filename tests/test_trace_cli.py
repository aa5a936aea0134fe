"""`blockspec trace`: table, JSON, stage values, weights files, plots, and its errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import blockspec
from blockspec.checkpoint.weights_file import load_weights
from .cli_run import run as run_cli

SPECS = Path(__file__).resolve().parents[1] / "examples" / "specs"

TINY = str(SPECS / "tiny-shakespeare.toml")


def test_json_lists_every_stage_with_n_5(capsys):
    code, out, _ = run_cli(capsys, "trace", TINY, "--text", "To be", "--json")
    assert code == 0
    data = json.loads(out)
    stages = {s["name"]: s for s in data["stages"]}
    assert set(data["stages"][0]) == {"name", "shape", "op", "component", "distribution", "section"}
    assert data["input"]["ids"] == [32, 53, 1, 40, 43]
    assert stages["tokens"]["shape"] == [5]
    assert stages["blocks.1.attn.weights"]["shape"] == [4, 5, 5]
    assert stages["blocks.0.ffn.act"]["shape"] == [5, 256]
    assert stages["logits"]["shape"] == stages["probs"]["shape"] == [5, 65]
    assert stages["blocks.0.norm1"]["section"] == "7.3 LayerNorm"
    assert stages["blocks.0.attn.weights"]["op"].startswith("softmax(q·kᵀ/√hs + mask)")
    assert data["weights"].startswith("random (seed 0")
    assert len(data["next_token"]) == 5


def test_first_row_of_every_head_is_one_then_zeros(capsys):
    code, out, _ = run_cli(capsys, "trace", TINY, "--text", "To be", "--json", "--stage", "blocks.*.attn.weights")
    assert code == 0
    stages = json.loads(out)["stages"]
    assert [s["name"] for s in stages] == ["blocks.0.attn.weights", "blocks.1.attn.weights"]
    for stage in stages:
        assert [head[0] for head in stage["values"]] == [[1.0, 0.0, 0.0, 0.0, 0.0]] * 4


def test_table_output(capsys):
    code, out, _ = run_cli(capsys, "trace", TINY, "--ids", "1,2,3")
    assert code == 0
    assert "random (seed 0" in out and "N = 3" in out
    assert any(line.split()[:2] == ["blocks.0.attn.weights", "4"] and "4 x 3 x 3" in line for line in out.splitlines())
    assert "next token after the last input token" in out


def test_seed_changes_the_random_weights(capsys):
    first = json.loads(run_cli(capsys, "trace", TINY, "--ids", "1", "--json", "--stage", "logits")[1])
    second = json.loads(run_cli(capsys, "trace", TINY, "--ids", "1", "--json", "--stage", "logits", "--seed", "3")[1])
    assert first["stages"][0]["values"] != second["stages"][0]["values"]


def test_weights_file_is_loaded(capsys, tmp_path, example_spec, registry):
    from safetensors.torch import save_model

    trained = blockspec.build(example_spec("tiny-shakespeare"), registry=registry, seed=11).eval()
    save_model(trained, str(tmp_path / "w.safetensors"))  # stores the tied head once
    code, out, _ = run_cli(capsys, "trace", TINY, "--ids", "5,6", "--weights", str(tmp_path / "w.safetensors"),
                           "--json", "--stage", "logits")
    assert code == 0
    logits = torch.tensor(json.loads(out)["stages"][0]["values"])
    assert torch.equal(logits, trained(torch.tensor([[5, 6]]))[0])


def test_weights_that_do_not_fit_are_named(tmp_path, example_spec, registry):
    from safetensors.torch import save_file

    model = blockspec.build(example_spec("tiny-shakespeare"), registry=registry, seed=0)
    state = {k: v.clone() for k, v in model.state_dict().items() if k != "head.weight"}
    del state["blocks.1.norm2.bias"]
    state["extra.weight"] = torch.zeros(2)
    save_file(state, str(tmp_path / "bad.safetensors"))
    state["blocks.0.ffn.up.weight"] = torch.zeros(3, 64)
    save_file(state, str(tmp_path / "bad.safetensors"))
    with pytest.raises(blockspec.CheckpointError) as caught:
        load_weights(model, tmp_path / "bad.safetensors")
    file = str(tmp_path / "bad.safetensors")
    assert str(caught.value).splitlines() == [  # every problem at once, each on its own located line
        f"{file}: tensor 'blocks.1.norm2.bias' (norm:layernorm from blockspec-norms): missing, expected shape [64]",
        f"{file}: tensor 'extra.weight': unexpected (the model has no such parameter or buffer)",
        f"{file}: tensor 'blocks.0.ffn.up.weight' (ffn:dense from blockspec): expected shape [256, 64], found [3, 64]",
    ]


def test_integer_weights_are_not_cast_into_a_float_model(tmp_path, example_spec, registry):
    from safetensors.torch import save_file

    model = blockspec.build(example_spec("tiny-shakespeare"), registry=registry, seed=0)
    state = {k: v.clone() for k, v in model.state_dict().items() if k != "head.weight"}
    state["final_norm.weight"] = torch.ones(64, dtype=torch.int32)
    save_file(state, str(tmp_path / "ints.safetensors"))
    with pytest.raises(blockspec.CheckpointError, match=r"tensor 'final_norm.weight': expected a floating dtype "
                                                         r"like float32, found I32"):
        load_weights(model, tmp_path / "ints.safetensors")


@pytest.mark.parametrize(("argv", "message"), [
    (("--text", "To be#"), "--text: character '#' at position 5"),
    (("--ids", "1,65"), "--ids: token id 65 is outside the vocabulary 0..64"),
    (("--ids", "1,x"), "--ids: expected an integer token id, found 'x'"),
    (("--ids", "1", "--top", "-1"), "--top: expected an integer >= 0, found '-1'"),
    (("--ids", "1", "--device", "tpu"), "--device: expected one of auto, cpu, cuda, cuda:N, mps, found 'tpu'"),
    (("--ids", "1", "--plot", "x.jpgg"), "--plot: expected a file ending in .png, .svg, .pdf, found 'x.jpgg'"),
    (("--ids", "1", "--plot", "no/such/folder/x.png"), "--plot: no/such/folder/x.png: the folder 'no/such/folder'"),
    (("--text", ""), "expected at least one character"),
    (("--text", "To", "--stage", "nothing*"), "no stage matches 'nothing*'"),
    (("--ids", ",".join(["1"] * 65)), "positions up to 64 requested"),
    (("--ids", "1", "--weights", "missing.safetensors"), "missing.safetensors: no such weights file"),
])
def test_bad_input_is_one_error_line(capsys, argv, message):
    code, out, err = run_cli(capsys, "trace", TINY, *argv)
    assert code == 2 and out == ""
    assert err.startswith("blockspec: error: ") and message in err and len(err.splitlines()) == 1


def test_not_a_safetensors_file(capsys, tmp_path):
    (tmp_path / "w.pt").write_bytes(b"\x80\x04not safetensors")
    code, _, err = run_cli(capsys, "trace", TINY, "--ids", "1", "--weights", str(tmp_path / "w.pt"))
    assert code == 2 and "not a readable safetensors file" in err


def test_text_on_a_vocabulary_without_characters(capsys, tmp_path):
    spec = (SPECS / "tiny-shakespeare.toml").read_text().replace("vocab_size = 65", "vocab_size = 100")
    (tmp_path / "v100.toml").write_text(spec)
    code, _, err = run_cli(capsys, "trace", str(tmp_path / "v100.toml"), "--text", "hi")
    assert code == 2 and "no character vocabulary is known for vocab_size 100" in err
    assert "give token ids with --ids instead of --text" in err


def test_plot_file_is_the_overview_and_the_other_pictures_are_its_siblings(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    code, out, _ = run_cli(capsys, "trace", TINY, "--text", "To be", "--plot", str(tmp_path / "trace.png"))
    assert code == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["trace-blocks.0.attention.png", "trace-blocks.1.attention.png", "trace-positional.png",
                     "trace.png"]
    assert all((tmp_path / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names)
    assert out.splitlines()[-4] == f"wrote {tmp_path / 'trace.png'}"


def test_plot_suffix_picks_the_format_of_every_picture(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    code, out, _ = run_cli(capsys, "trace", TINY, "--ids", "1,2", "--plot", str(tmp_path / "t.svg"), "--json")
    assert code == 0
    plots = json.loads(out)["plots"]
    assert plots[0] == str(tmp_path / "t.svg") and len(plots) == 4
    assert all(Path(p).suffix == ".svg" and b"<svg" in Path(p).read_bytes()[:500] for p in plots)


def test_plots_without_matplotlib_say_how_to_install(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    code, _, err = run_cli(capsys, "trace", TINY, "--ids", "1", "--plot", str(tmp_path / "t.png"))
    assert code == 2 and err.startswith("blockspec: error: --plot: ") and "pip install 'blockspec[plot]'" in err


def test_json_sections_name_the_norm_and_weights_name_the_score_bias(capsys, tmp_path):
    spec = tmp_path / "alibi-rms.toml"
    spec.write_text((SPECS / "tiny-shakespeare.toml").read_text(encoding="utf-8")
                    .replace('use = "learned"', 'use = "alibi"').replace('use = "layernorm"', 'use = "rmsnorm"'),
                    encoding="utf-8")
    code, out, _ = run_cli(capsys, "trace", str(spec), "--ids", "1,2,3", "--json")
    assert code == 0
    stages = {s["name"]: s for s in json.loads(out)["stages"]}
    assert set(stages["final_norm"]) == {"name", "shape", "op", "component", "distribution", "section"}
    assert stages["blocks.0.norm1"]["section"] == stages["final_norm"]["section"] == "7.3 norm (rmsnorm)"
    assert stages["blocks.1.attn.weights"]["op"].startswith("softmax(q·kᵀ/√hs + bias + mask)")
    assert stages["blocks.1.attn.score_bias"]["section"] == "7.1 positions"
