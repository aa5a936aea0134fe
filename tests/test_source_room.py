"""The room for model sources (issue 21): one call opens any path, one rule picks its tokenizer.

Every kind of source is made once (source_room.py: a spec file, checkpoints with no, a character and a BPE
tokenizer, a training checkpoint, a Hugging Face directory), and every command that takes a
model source must see the same spec and the same tokenizer in it. A command joins the check
with one entry in ``COMMANDS``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import io
import json
import tokenize
from collections.abc import Callable
from pathlib import Path

import pytest

import blockspec
from blockspec.cli import main
from blockspec.interop import export_hf

from .source_room import FAST, VOCAB, cli  # the room itself: conftest's session fixture

pytest.importorskip("tokenizers")

TEXT = "the lord"
CORE = Path(blockspec.__file__).parent


# ---------------------------------------------------------------- bug 1: trace feeds the checkpoint's tokens


def test_trace_of_a_bpe_checkpoint_feeds_the_checkpoints_own_tokens(room, capsys):
    from tokenizers import Tokenizer

    bpe = Tokenizer.from_file(str(room / "tok" / "tokenizer.json"))
    capsys.readouterr()
    assert main(["trace", str(room / "training"), "--text", "the quick", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["input"]
    assert found["ids"] == bpe.encode("the quick", add_special_tokens=False).ids
    assert found["ids"] != list(b"the quick")
    assert found["tokenizer"] == f"Hugging Face tokenizer.json ({VOCAB} tokens)"


# ---------------------------------------------------------------- one rule, every command, every kind


def traced(path: Path, capsys) -> dict | None:
    code = main(["trace", str(path), "--text", TEXT, "--json", "--top", "0"])
    out, err = capsys.readouterr()
    assert code == 0, err
    found = json.loads(out)
    return {"model": found["model"], "ids": found["input"]["ids"], "tokenizer": found["input"]["tokenizer"]}


def explored(path: Path, capsys) -> dict | None:
    page = path.parent / f"{path.name}-explore.html"
    code = main(["explore", str(path), "--text", TEXT, "--out", str(page), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    found = json.loads(out)
    return {"model": found["model"], "ids": found["input"]["ids"], "tokenizer": found["input"]["tokenizer"]}


def generated(path: Path, capsys) -> dict | None:
    """None where generate refuses text: a source without weights or without a tokenizer."""
    code = main(["generate", str(path), "--prompt", TEXT, "--max-new-tokens", "2", "--temperature", "0", "--json"])
    out, err = capsys.readouterr()
    if code == 2:
        assert err.startswith("blockspec: error: ") and len(err.strip().splitlines()) == 1, err
        return None
    assert code == 0, err
    found = json.loads(out)
    return {"model": found["model"], "ids": found["ids"][: len(found["ids"]) - 2], "tokenizer": found["tokenizer"]}


def _saved(checkpoint: Path) -> dict:
    """What a run saved: its model's name, and TEXT in the tokenizer it trained with."""
    from blockspec.sources import open_source

    saved = open_source(checkpoint)
    tokenizer = saved.tokenizer()
    return {"model": saved.spec.model.name, "ids": tokenizer.encode(TEXT), "tokenizer": tokenizer.describe()}


def trained(path: Path, capsys) -> dict | None:
    out = path.parent / f"{path.name}-trained"
    code = main(["train", str(path), "--data", str(path.parent / "play.txt"), *FAST, "--steps", "1",
                 "--out", str(out), "--force"])
    assert code == 0, capsys.readouterr().err
    return _saved(out)


def swept(path: Path, capsys) -> dict | None:
    out = path.parent / f"{path.name}-swept"
    code = main(["sweep", str(path), "--data", str(path.parent / "play.txt"), "--vary", "model.dropout=0.0",
                 "--batch-size", "4", "--eval-batches", "1", "--eval-every", "0", "--steps", "1", "--out", str(out),
                 "--force"])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    (run,) = [p.parent for p in (out / "runs").rglob("spec.toml")]
    return _saved(run)


COMMANDS: dict[str, Callable[[Path, object], dict | None]] = {"trace": traced, "explore": explored,
                                                               "generate": generated, "train": trained,
                                                               "sweep": swept}
KINDS = {  # name -> (source kind, own tokenizer: None, "char" or "bpe")
    "spec": ("spec", None), "bare": ("checkpoint", None), "char": ("training-checkpoint", "char"),
    "training": ("training-checkpoint", "bpe"), "imported": ("checkpoint", "bpe"), "hf": ("hf", "bpe"),
}


def source_path(room: Path, name: str) -> Path:
    return room / ("bpe.toml" if name == "spec" else name)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_command_sees_the_sources_spec_and_tokenizer(room, registry, capsys, name, command):
    from blockspec.sources import open_source, stand_in_tokenizer

    source = open_source(source_path(room, name), registry)
    kind, own = KINDS[name]
    assert source.kind == kind
    tokenizer = source.tokenizer()
    assert (tokenizer is None) == (own is None)
    if own == "char":
        assert isinstance(tokenizer, blockspec.CharTokenizer)
    found = COMMANDS[command](source_path(room, name), capsys)
    if found is None:  # refused: only where the source cannot continue text
        assert command == "generate" and (tokenizer is None or not source.has_weights)
        return
    if tokenizer is None and command in ("train", "sweep"):  # no tokenizer of its own: the text's characters
        tokenizer = blockspec.CharTokenizer.from_text((room / "play.txt").read_text())
    expected = tokenizer or stand_in_tokenizer(source.spec.model.vocab_size)
    assert found == {"model": source.spec.model.name, "ids": expected.encode(TEXT),
                     "tokenizer": expected.describe()}


def test_a_source_gives_its_carried_files_and_training_document(room, registry):
    from blockspec.sources import open_source

    hf, imported = open_source(room / "hf", registry), open_source(room / "imported", registry)
    assert imported.carried() == hf.carried() and "tokenizer.json" in hf.carried()
    assert open_source(room / "bare", registry).carried() == {}
    assert open_source(room / "training", registry).training()["step"] == 1
    assert hf.training() is None and open_source(room / "bpe.toml", registry).training() is None


def test_a_directory_that_is_no_source_is_one_clear_error(tmp_path, registry):
    from blockspec.sources import open_source

    with pytest.raises(blockspec.CheckpointError, match="neither a blockspec checkpoint .* nor a Hugging Face"):
        open_source(tmp_path, registry)


# ---------------------------------------------------------------- carried files: library and command agree


def test_library_and_command_export_write_the_same_files(room, tmp_path):
    export_hf(blockspec.load(room / "imported"), tmp_path / "library")
    cli("export-hf", room / "imported", "--out", tmp_path / "command")

    def files(folder: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}

    assert files(tmp_path / "library") == files(tmp_path / "command")
    assert files(tmp_path / "library")["tokenizer.json"] == (room / "tok" / "tokenizer.json").read_bytes()


def test_saving_a_loaded_hugging_face_model_keeps_its_files_as_import_does(room, tmp_path):
    blockspec.save(blockspec.load(room / "hf"), tmp_path / "saved")
    saved = blockspec.checkpoint.directory.read_checkpoint_manifest(tmp_path / "saved").files
    imported = blockspec.checkpoint.directory.read_checkpoint_manifest(room / "imported").files
    assert {n: r.sha256 for n, r in saved.items()} == {n: r.sha256 for n, r in imported.items()}


# ---------------------------------------------------------------- the layout's file names, defined once


OWNERS = {  # a file name of a layout -> the modules allowed to spell it (the layout's owners)
    "manifest.json": {"checkpoint/layout.py"},
    "spec.toml": {"checkpoint/layout.py"},
    "training.json": {"checkpoint/layout.py"},
    "optimizer.safetensors": {"checkpoint/layout.py"},
    "hf/": {"checkpoint/layout.py"},
    "model.safetensors": {"checkpoint/layout.py", "interop/hf_layout.py"},
    "config.json": {"interop/hf_layout.py"},
    "tokenizer.json": {"checkpoint/layout.py", "interop/hf_layout.py", "data/tokenizer.py"},
    "meta.json": {"data/prepared.py"},
}


def string_constants(path: Path) -> set[str]:
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    found = set()
    for token in tokens:
        if token.type == tokenize.STRING and not token.string.lstrip("rbRB").startswith(("f", "F")):
            value = ast.literal_eval(token.string)
            found.add(value) if isinstance(value, str) else None
    return found


def test_no_layout_file_name_is_spelt_outside_its_owner():
    spelt = {}
    for path in sorted(CORE.rglob("*.py")):
        for name in string_constants(path) & set(OWNERS):
            spelt.setdefault(name, set()).add(path.relative_to(CORE).as_posix())
    strays = {name: sorted(where - OWNERS[name]) for name, where in spelt.items() if where - OWNERS[name]}
    assert strays == {}


# ---------------------------------------------------------------- cheap to open; old paths keep working


def test_opening_a_spec_file_loads_no_torch():
    code = ("import sys\nfrom blockspec.sources import open_source\n"
            "source = open_source('examples/specs/tiny-shakespeare.toml')\n"
            "print(source.kind, source.tokenizer(), 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=CORE.parents[1])
    assert done.stdout.split() == ["spec", "None", "False"], done.stderr


@pytest.mark.parametrize(("old", "name"), [("blockspec.interop.sources", "load_spec_or_checkpoint"),
                                           ("blockspec.train.tokenizer", "CharTokenizer"),
                                           ("blockspec.train.textfiles", "chunks"),
                                           ("blockspec.train.prepared", "PreparedDataset"),
                                           ("blockspec.train.data", "CharDataset")])
def test_the_old_paths_still_import_with_a_warning(old, name):
    code = (f"import warnings\nwarnings.simplefilter('always')\nwith warnings.catch_warnings(record=True) as seen:\n"
            f"    from {old} import {name}\nprint({name}.__module__, seen[0].category.__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    module, warning = done.stdout.split()
    assert module.startswith(("blockspec.sources", "blockspec.data")) and warning == "DeprecationWarning", done.stderr
