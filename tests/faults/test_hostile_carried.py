"""Carried files never leave their directory (issue 22, item 1): a Hugging Face directory's files, and a
checkpoint's, are read only when they are regular files inside it (or inside a cache snapshot's blobs/), of
bounded size; anything else is refused in one line, exit 2, the previous checkpoint byte-identical, and the
secret a link points at is in no output and no message."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import blockspec
from blockspec.checkpoint.directory import load, save
from blockspec.checkpoint.safetensors_file import read_header
from blockspec.errors import CheckpointError
from blockspec.interop import import_hf
from blockspec.interop.hf_layout import CARRIED_LIMIT
from blockspec.sources import tokenizer_of

from ..test_families import spec_of
from ..test_hostile_checkpoints import hang_guard
from .hostile_dirs import CANARY, cli, holds_canary, plant_canary, pristine, registry, tree, write

HANG_GUARD_S = 20  # a FIFO that were opened would block for ever: this turns a hang into a failure
TOKENIZER = json.dumps({"version": "1.0", "model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1},
                                                     "unk_token": "a"}}).encode()


@pytest.fixture
def scene(tmp_path_factory, tmp_path):
    """A good gpt2 directory ``hf`` (with a tokenizer), a good checkpoint ``ck`` imported from it, a secret
    beside them."""
    files = {**pristine("gpt2", tmp_path_factory.getbasetemp() / "pristine"), "tokenizer.json": TOKENIZER}
    hf = write(files, tmp_path / "hf")
    assert cli("import-hf", hf, "--out", tmp_path / "ck")[0] == 0
    plant_canary(tmp_path)
    return tmp_path


def refused_at_the_cli(scene: Path, *expected: str) -> str:
    """import-hf over the good checkpoint with --force: one line, exit 2, nothing changed, no secret read."""
    before, source = tree(scene / "ck"), tree(scene / "hf")
    with hang_guard(HANG_GUARD_S):
        code, lines = cli("import-hf", scene / "hf", "--out", scene / "ck", "--force")
    assert (code, len(lines)) == (2, 1), lines
    assert lines[0].startswith("blockspec: error: ") and all(word in lines[0] for word in expected), lines[0]
    assert CANARY.decode() not in lines[0]
    assert tree(scene / "ck") == before and tree(scene / "hf") == source
    assert sorted(p.name for p in scene.iterdir()) == ["ck", "hf", "secret.txt"]  # no staging left beside
    assert holds_canary(scene) == [str(scene / "secret.txt")]
    return lines[0]


def relink(path: Path, target: str | Path) -> None:
    if os.path.lexists(path):
        path.unlink()
    path.symlink_to(target)


@pytest.mark.parametrize("name", ["tokenizer.json", "merges.txt", "vocab.json", "tokenizer_config.json",
                                  "config.json", "model.safetensors"])
@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_a_link_out_of_the_directory_is_refused(scene, name, how):
    relink(scene / "hf" / name, scene / "secret.txt" if how == "absolute" else "../secret.txt")
    line = refused_at_the_cli(scene, f"hf/{name}", "a link out of its directory")
    assert "secret.txt" in line  # where it leads is said; what it holds never is


def test_the_reported_environ_link_is_refused(scene):
    relink(scene / "hf" / "tokenizer.json", "/proc/self/environ")
    refused_at_the_cli(scene, "hf/tokenizer.json", "a link out of its directory")


def test_a_shard_linked_out_of_the_directory_is_refused(scene):
    hf = scene / "hf"
    (hf / "model.safetensors").rename(hf / "model-00001-of-00001.safetensors")
    names = read_header(hf / "model-00001-of-00001.safetensors").entries
    index = {"metadata": {}, "weight_map": dict.fromkeys(names, "model-00001-of-00001.safetensors")}
    (hf / "model.safetensors.index.json").write_text(json.dumps(index))
    assert import_hf(hf, registry=registry()) is not None  # the sharded form itself imports
    relink(hf / "model-00001-of-00001.safetensors", scene / "secret.txt")
    refused_at_the_cli(scene, "model-00001-of-00001.safetensors", "a link out of its directory")


@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "broken link"])
def test_a_tokenizer_that_is_no_regular_file_is_refused_unopened(scene, kind):
    path = scene / "hf" / "tokenizer.json"
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")  # inside no directory, and endless: never read
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("tokenizer-gone.json")
    expected = {"fifo": "is a FIFO", "device": "a link out", "directory": "is a directory",
                "broken link": "a broken link"}[kind]
    refused_at_the_cli(scene, "hf/tokenizer.json", expected)


def test_a_fifo_config_or_weights_file_does_not_hang(scene):
    for name in ("model.safetensors", "config.json"):
        (scene / "hf" / name).unlink()
        os.mkfifo(scene / "hf" / name)
        with hang_guard(HANG_GUARD_S):
            code, lines = cli("import-hf", scene / "hf", "--out", scene / "ck", "--force")
        assert code == 2 and len(lines) == 1 and lines[0].startswith("blockspec: error: "), lines


def test_a_huge_tokenizer_is_refused_not_dropped(scene):
    with open(scene / "hf" / "tokenizer.json", "wb") as handle:
        handle.truncate(CARRIED_LIMIT + 1)  # sparse: costs no disk
    refused_at_the_cli(scene, "hf/tokenizer.json", f"more than the {CARRIED_LIMIT:,}-byte limit")


def cache_snapshot(root: Path, files: dict[str, bytes]) -> Path:
    """huggingface_hub's layout: snapshots/<rev>/<name> -> ../../blobs/<hash>."""
    repo = root / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    for number, (name, data) in enumerate(sorted(files.items())):
        (repo / "blobs" / f"blob{number:04d}").write_bytes(data)
        (snapshot / name).symlink_to(f"../../blobs/blob{number:04d}")
    return snapshot


def test_a_cache_snapshot_imports_through_its_blob_links(tmp_path, tmp_path_factory):
    files = {**pristine("gpt2", tmp_path_factory.getbasetemp() / "pristine"), "tokenizer.json": TOKENIZER}
    model = import_hf(cache_snapshot(tmp_path, files), registry=registry())
    assert model.carried["tokenizer.json"] == TOKENIZER and set(model.carried) == {"config.json", "tokenizer.json"}


def test_a_snapshot_whose_blobs_folder_is_a_link_out_is_refused(tmp_path, tmp_path_factory):
    files = {**pristine("gpt2", tmp_path_factory.getbasetemp() / "pristine"), "tokenizer.json": TOKENIZER}
    snapshot = cache_snapshot(tmp_path / "cache", files)
    outside = tmp_path / "elsewhere"
    (snapshot.parent.parent / "blobs").rename(outside)
    (snapshot.parent.parent / "blobs").symlink_to(outside)  # a hostile snapshot widening what it may reach
    with pytest.raises(CheckpointError, match="config.json: a link out of its directory"):
        import_hf(snapshot, registry=registry())


def test_a_hugging_face_tokenizer_linked_out_is_never_read(scene):
    relink(scene / "hf" / "tokenizer.json", scene / "secret.txt")
    with pytest.raises(CheckpointError, match="a link out of its directory") as caught:
        tokenizer_of(scene / "hf")
    assert CANARY.decode() not in str(caught.value)


def test_a_checkpoint_file_linked_out_is_refused_even_when_its_digest_matches(tmp_path):
    """A forger who knows a file's digest (a public key, a config) still cannot make load read it."""
    model = blockspec.build(spec_of("gpt2", registry()), registry=registry(), seed=0)
    model.carried = {"tokenizer.json": CANARY}  # the manifest records the secret's own size and sha256
    checkpoint = save(model, tmp_path / "ck")
    relink(checkpoint / "hf" / "tokenizer.json", plant_canary(tmp_path))
    with pytest.raises(CheckpointError, match="hf/tokenizer.json: a link out of its directory"):
        load(checkpoint, registry=registry())
    code, lines = cli("export-hf", checkpoint, "--out", tmp_path / "out")
    assert code == 2 and len(lines) == 1 and "a link out of its directory" in lines[0], lines
    assert holds_canary(tmp_path) == [str(tmp_path / "secret.txt")]


# ---------------------------------------------------------------- a tokenizer directory (--tokenizer DIR, data)


def test_a_tokenizer_directory_whose_file_links_out_is_refused(tmp_path):
    """`data prepare --tokenizer DIR` reads DIR/tokenizer.json: a link out of DIR is refused, never read, and the
    secret reaches neither the message nor the prepared dataset."""
    plant_canary(tmp_path)
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").symlink_to(tmp_path / "secret.txt")
    (tmp_path / "play.txt").write_text("to be or not to be\n" * 50)
    code, lines = cli("data", "prepare", tmp_path / "play.txt", "--tokenizer", tmp_path / "tok",
                      "--out", tmp_path / "data", "--quiet")
    assert (code, len(lines)) == (2, 1), lines
    assert "a link out of its directory" in lines[0] and CANARY.decode() not in lines[0], lines[0]
    assert not (tmp_path / "data").exists()
    assert holds_canary(tmp_path) == [str(tmp_path / "secret.txt")]
