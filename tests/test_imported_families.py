"""Every Hugging Face family, imported: ``show``, ``trace``, ``explore`` and ``generate`` work on the checkpoint,
``show`` counts a config.json alone exactly as transformers counts the model, and every key of a full config is accounted for.

The families come from ``FAMILIES`` and their small configs from ``test_families.EXAMPLES``, so a new family
is covered here as soon as it is listed.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import blockspec
from blockspec.cli import main
from blockspec.interop.families import FAMILIES
from blockspec.interop.hf_config import spec_dict

from .test_families import EXAMPLES

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
transformers.logging.set_verbosity_error()

NAMES = [family.name for family in FAMILIES]
WORDS = ["to", "be", "or", "not", "that", "is", "the", "question"]


def hf_model(name: str, *, meta: bool = False):
    """The family's example config as a transformers model (random weights, or shapes only)."""
    config = dict(EXAMPLES[name])
    model_type = config.pop("model_type")
    config.pop("architectures", None)
    hf_config = transformers.AutoConfig.for_model(model_type, **config)
    with torch.device("meta" if meta else "cpu"):
        return transformers.AutoModelForCausalLM.from_config(hf_config)


def word_tokenizer() -> bytes:
    """A tiny word-level tokenizer.json: its ids fit every example's vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{word: i + 1 for i, word in enumerate(WORDS)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer.to_str().encode()


@pytest.fixture(params=NAMES)
def imported(request, tmp_path_factory, capsys):
    """(family name, HF directory, checkpoint imported from it with import-hf)."""
    name, root = request.param, tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    hf_model(name).save_pretrained(root / "hf")
    (root / "hf" / "tokenizer.json").write_bytes(word_tokenizer())
    assert main(["import-hf", str(root / "hf"), "--out", str(root / "ckpt")]) == 0, capsys.readouterr().err
    capsys.readouterr()
    return name, root / "hf", root / "ckpt"


def cli(capsys, *argv) -> str:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_show_trace_explore_and_generate_work_on_an_imported_checkpoint(imported, capsys, tmp_path):
    name, _, checkpoint = imported
    shown = json.loads(cli(capsys, "show", checkpoint, "--json"))
    assert shown["parameters"] == sum(p.numel() for p in hf_model(name, meta=True).parameters())
    assert "stages" in json.loads(cli(capsys, "trace", checkpoint, "--ids", "1,2,3,4", "--json"))
    page = tmp_path / "page.html"
    cli(capsys, "explore", checkpoint, "--ids", "1,2,3", "--out", page)
    assert page.stat().st_size > 0
    text = json.loads(cli(capsys, "generate", checkpoint, "--prompt", "to be or", "--max-new-tokens", "5",
                          "--temperature", "0", "--json"))["text"]
    assert text.startswith("to be or")
    ids = cli(capsys, "generate", checkpoint, "--ids", "1,2", "--max-new-tokens", "4", "--temperature", "0")
    assert len(ids.strip().split(",")) == 6


@pytest.mark.parametrize("name", NAMES)
def test_show_counts_a_config_json_alone_as_transformers_does(name, tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(EXAMPLES[name]))
    shown = json.loads(cli(capsys, "show", tmp_path, "--json"))
    assert shown["parameters"] == sum(p.numel() for p in hf_model(name, meta=True).parameters())


def test_generate_without_a_tokenizer_asks_for_ids(tmp_path, capsys):
    name = NAMES[0]
    hf_model(name).save_pretrained(tmp_path / "hf")
    cli(capsys, "import-hf", tmp_path / "hf", "--out", tmp_path / "ckpt")
    assert main(["generate", str(tmp_path / "ckpt"), "--prompt", "hello"]) == 2
    err = capsys.readouterr().err
    assert "carries no tokenizer" in err and "--ids" in err and "Traceback" not in err


@pytest.mark.parametrize("name", NAMES)
def test_a_config_with_every_key_transformers_writes_imports(name, registry):
    """Every key of the family's config, defaults included, is read, mapped or declared inert: none is unknown."""
    config = {**hf_model(name, meta=True).config.to_dict(), **EXAMPLES[name]}
    spec = blockspec.structure_spec(spec_dict(config, file="config.json", name="m"), registry)
    assert spec.model.n_layers == EXAMPLES[name].get("num_hidden_layers", EXAMPLES[name].get("n_layer"))


def test_the_families_add_nothing_to_import_blockspec():
    code = "import sys, blockspec; print(sorted(m for m in sys.modules if m.startswith('blockspec.interop')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
