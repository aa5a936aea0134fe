"""The Python API a notebook user expects (issue 28): ``blockspec.generate``, ``blockspec.load_tokenizer``,
``dir(blockspec)``, and errors that name what was given (a missing path, a wrong type, float ids)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import blockspec
from blockspec.cli import main

from .corpus import small_play
from .specs import spec_text

MICRO = spec_text(name="char-micro", vocab_size=65, context_length=16, d_model=16, n_layers=1, n_heads=2, d_ff=32)
FAST = ["--batch-size", "4", "--eval-batches", "1", "--eval-every", "0", "--lr", "1e-2", "--quiet"]
PROMPT = "the lord"


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A spec file and the character checkpoint one training step makes of it."""
    root = tmp_path_factory.mktemp("api")
    (root / "play.txt").write_text(small_play(200))
    (root / "micro.toml").write_text(MICRO)
    assert main(["train", str(root / "micro.toml"), "--data", str(root / "play.txt"), *FAST, "--steps", "1",
                 "--out", str(root / "ckpt")]) == 0
    return root


def command_json(argv: list[str], capsys) -> dict:
    import json

    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


# ---------------------------------------------------------------- dir(blockspec), __all__ and the lazy table


def test_dir_lists_every_public_name_the_lazy_ones_included():
    assert {"build", "load", "save", "generate", "load_tokenizer", "open_source", "count_parameters"} <= set(
        dir(blockspec))
    assert dir(blockspec) == sorted(blockspec.__all__)


def test_all_the_eager_names_and_the_lazy_table_are_in_step():
    lazy = set(blockspec._LAZY) | set(blockspec._LAZY_MODULES) | {"trace"}
    eager = {name for name, value in vars(blockspec).items()
             if not name.startswith("_") and not isinstance(value, type(sys)) and name not in {"annotations",
                                                                                                 "import_module",
                                                                                                 "TYPE_CHECKING"}}
    assert set(blockspec.__all__) == eager | lazy
    assert len(blockspec.__all__) == len(set(blockspec.__all__))
    for name in blockspec.__all__:
        assert getattr(blockspec, name) is not None, name


def test_the_lazy_names_still_load_no_torch_at_import():
    code = "import sys, blockspec; dir(blockspec); print('torch' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert found.strip() == "False"


# ---------------------------------------------------------------- blockspec.load_tokenizer


def test_load_tokenizer_is_the_sources_own_tokenizer(sources):
    tokenizer = blockspec.load_tokenizer(sources / "ckpt")
    assert tokenizer == blockspec.open_source(sources / "ckpt").tokenizer()
    assert tokenizer.decode(tokenizer.encode(PROMPT)) == PROMPT


def test_load_tokenizer_of_a_spec_file_says_it_carries_none(sources):
    with pytest.raises(blockspec.TokenizerError, match=r"micro\.toml: a spec file carries no tokenizer"):
        blockspec.load_tokenizer(sources / "micro.toml")


def test_load_tokenizer_of_a_missing_path_says_it_does_not_exist(tmp_path):
    with pytest.raises(blockspec.BlockspecError, match=r"(?i)nothing: .*no such file or directory"):
        blockspec.load_tokenizer(tmp_path / "nothing")


# ---------------------------------------------------------------- blockspec.generate


def test_generate_from_a_path_gives_what_the_command_gives(sources, capsys):
    found = blockspec.generate(sources / "ckpt", PROMPT, max_new_tokens=5, temperature=0)
    said = command_json(["generate", str(sources / "ckpt"), "--prompt", PROMPT, "--max-new-tokens", "5",
                         "--temperature", "0", "--json"], capsys)
    assert found.text == said["text"] and list(found.ids) == said["ids"]
    assert found.text.startswith(PROMPT) and len(found.new_ids) == 5
    assert str(found) == found.text


def test_generate_samples_as_the_command_does_with_its_defaults(sources, capsys):
    found = blockspec.generate(sources / "ckpt", PROMPT, max_new_tokens=8)
    said = command_json(["generate", str(sources / "ckpt"), "--prompt", PROMPT, "--max-new-tokens", "8",
                         "--json"], capsys)
    assert found.text == said["text"]


def test_generate_from_a_model_and_ids(sources):
    model = blockspec.load(sources / "ckpt")
    ids = blockspec.load_tokenizer(sources / "ckpt").encode(PROMPT)
    from_path = blockspec.generate(sources / "ckpt", PROMPT, max_new_tokens=4, temperature=0)
    for prompt in (ids, torch.tensor(ids), torch.tensor([ids])):
        found = blockspec.generate(model, prompt, max_new_tokens=4, temperature=0)
        assert found.ids == from_path.ids and found.text is None and found.prompt_length == len(ids)
    assert model.training  # generation leaves the mode as it found it


def test_generate_from_a_model_decodes_with_a_tokenizer_given(sources):
    model = blockspec.load(sources / "ckpt")
    tokenizer = blockspec.load_tokenizer(sources / "ckpt")
    found = blockspec.generate(model, PROMPT, tokenizer=tokenizer, max_new_tokens=3, temperature=0)
    assert found.text == blockspec.generate(sources / "ckpt", PROMPT, max_new_tokens=3, temperature=0).text


def test_generate_text_with_a_model_and_no_tokenizer_says_what_to_give(sources):
    model = blockspec.load(sources / "ckpt")
    with pytest.raises(blockspec.InputError, match=r"prompt: a model object knows no tokenizer.*load_tokenizer"):
        blockspec.generate(model, PROMPT, max_new_tokens=1)


def test_generate_refuses_float_ids_naming_the_dtype(sources):
    model = blockspec.load(sources / "ckpt")
    for prompt in (torch.tensor([[1.0, 2.0]]), [1.0, 2.0]):
        with pytest.raises(blockspec.InputError, match=r"prompt: expected .*integer.*found .*float"):
            blockspec.generate(model, prompt, max_new_tokens=1)


@pytest.mark.parametrize("prompt", ["", [], torch.tensor([[1, 2], [3, 4]]), 3, None])
def test_generate_refuses_a_prompt_it_cannot_take_in_one_line(sources, prompt):
    with pytest.raises(blockspec.InputError, match=r"^prompt: ") as caught:
        blockspec.generate(sources / "ckpt", prompt, max_new_tokens=1)
    assert len(str(caught.value).splitlines()) == 1


def test_generate_from_a_spec_file_or_a_missing_path_is_refused(sources, tmp_path):
    with pytest.raises(blockspec.CheckpointError, match="a spec file holds no weights"):
        blockspec.generate(sources / "micro.toml", PROMPT)
    with pytest.raises(blockspec.CheckpointError, match="nothing: no such checkpoint directory"):
        blockspec.generate(tmp_path / "nothing", PROMPT)


def test_generate_refuses_what_is_neither_a_model_nor_a_path():
    with pytest.raises(blockspec.InputError, match=r"model: expected a Transformer .* or a path.*found dict"):
        blockspec.generate({}, [1, 2])


# ---------------------------------------------------------------- float ids at the model


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool, torch.int16])
def test_a_model_refuses_ids_of_a_dtype_the_embedding_cannot_take(sources, dtype):
    model = blockspec.load(sources / "ckpt")
    with pytest.raises(blockspec.InputError, match=rf"ids: expected integer token ids .*found {dtype}"):
        model(torch.tensor([[1, 2]]).to(dtype))


def test_a_model_takes_int32_and_int64_ids(sources):
    model = blockspec.load(sources / "ckpt").eval()
    wide, narrow = (model(torch.tensor([[1, 2]], dtype=dtype)) for dtype in (torch.long, torch.int32))
    assert torch.equal(wide, narrow)


def test_a_model_refuses_a_list_naming_its_type(sources):
    model = blockspec.load(sources / "ckpt")
    with pytest.raises(blockspec.InputError, match=r"ids: expected a tensor of token ids.*found list"):
        model([[1, 2]])


def test_generate_at_the_sampler_refuses_float_ids(sources):
    from blockspec.generation.tokens import generate

    with pytest.raises(blockspec.InputError, match="found torch.float32"):
        generate(blockspec.load(sources / "ckpt"), torch.tensor([[1.0, 2.0]]), max_new_tokens=2)


# ---------------------------------------------------------------- build and count take what users give


def test_build_takes_the_path_of_a_spec_file_as_count_parameters_does(sources, registry):
    spec = blockspec.load_spec(sources / "micro.toml", registry)
    from_path = blockspec.build(sources / "micro.toml", registry=registry, seed=0)
    from_str = blockspec.build(str(sources / "micro.toml"), registry=registry, seed=0)
    from_spec = blockspec.build(spec, registry=registry, seed=0)
    assert from_path.spec == from_spec.spec
    for model in (from_path, from_str):
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), from_spec.state_dict().values()))


def test_build_of_a_checkpoint_points_at_load_and_at_its_spec(sources):
    with pytest.raises(blockspec.SpecError, match=r"ckpt: a directory.*blockspec\.load\(path\).*open_source"):
        blockspec.build(sources / "ckpt")


def test_build_and_count_of_a_missing_path_say_it_does_not_exist(tmp_path):
    for call in (blockspec.build, blockspec.count_parameters):
        with pytest.raises(blockspec.SpecError, match="nothing.toml: cannot read spec: No such file"):
            call(tmp_path / "nothing.toml")


@pytest.mark.parametrize("given", [3, None, {"model": {}}, b"spec.toml"])
def test_build_and_count_refuse_another_type_naming_it(given):
    for call in (blockspec.build, blockspec.count_parameters):
        with pytest.raises(blockspec.InputError, match=rf"^spec: expected a ModelSpec or the path of a spec "
                                                        rf"file \(str or Path\), found {type(given).__name__}"):
            call(given)


# ---------------------------------------------------------------- load and open_source name what was given


def test_load_of_a_missing_path_says_it_does_not_exist(tmp_path):
    with pytest.raises(blockspec.CheckpointError) as caught:
        blockspec.load(tmp_path / "missing")
    assert "missing: no such checkpoint directory (nor a Hugging Face directory)" in str(caught.value)
    assert "spec" not in str(caught.value)


def test_load_of_a_spec_file_says_a_spec_holds_no_weights_and_what_to_do(sources):
    with pytest.raises(blockspec.CheckpointError, match=r"micro\.toml: a spec file holds no weights.*build"):
        blockspec.load(sources / "micro.toml")


@pytest.mark.parametrize("call", ["load", "open_source", "load_tokenizer"])
def test_a_path_argument_of_another_type_is_named(call):
    with pytest.raises(blockspec.InputError, match=r"^path: expected a path \(str or Path\), found int"):
        getattr(blockspec, call)(3)


def test_an_error_names_the_path_once(tmp_path):
    with pytest.raises(blockspec.CheckpointError) as caught:
        blockspec.open_source(tmp_path)
    assert str(caught.value).count(str(tmp_path)) == 1, str(caught.value)
    assert Path(caught.value.problems[0].file) == tmp_path


def test_trace_and_the_estimate_given_a_path_say_what_they_take(tmp_path):
    """Siblings of build's path: each names the type it was given and what to call instead."""
    import torch

    spec_path = tmp_path / "x.toml"
    with pytest.raises(blockspec.ArgumentTypeError, match=r"^model: expected a built model.*found str"):
        blockspec.trace(str(spec_path), torch.tensor([[1, 2]]))
    with pytest.raises(blockspec.ArgumentTypeError, match=r"^model: expected a ModelConfig.*found str"):
        blockspec.estimate_parameters(str(spec_path))


def test_load_spec_of_a_folder_points_at_the_spec_inside(sources, tmp_path):
    with pytest.raises(blockspec.SpecError, match=r"is a directory, not a spec file; give a \.toml file, e\.g\. .*ckpt"):
        blockspec.load_spec(sources / "ckpt")
    with pytest.raises(blockspec.SpecError, match=r"is a directory, not a spec file; give a \.toml file$"):
        blockspec.load_spec(tmp_path)


def test_save_to_something_that_is_not_a_path_names_it(sources):
    with pytest.raises(blockspec.InputError, match="^path: expected a folder to write the checkpoint to .*found int"):
        blockspec.save(blockspec.load(sources / "ckpt"), 3)
