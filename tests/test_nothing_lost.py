"""Nothing lost: no output replaced unasked, no refusal after the work, files others can read,
and a model that loads without its optimizer state."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blockspec
from blockspec import outputs
from blockspec.checkpoint import atomic
from blockspec.checkpoint.directory import TRAINING_FILES, load, read_checkpoint_manifest, save
from blockspec.checkpoint.layout import CHECKPOINT
from blockspec.outputs import OutputExistsError, check_writable_target
from blockspec.cli import main
from blockspec.errors import CheckpointError
from blockspec.interop import export_hf
from blockspec.train import checkpointing
from blockspec.train.loop import Trainer

from .corpus import small_play
from .specs import spec_text
from .weights_helpers import gpt2_spec, randomized
from .cli_run import run

# vocab_size = the text's characters: an untrained model then never samples an id the tokenizer lacks
SPEC = spec_text(name="micro", vocab_size=len(set(small_play())), context_length=16, d_model=16, n_layers=1, n_heads=2, d_ff=32)
FAST = ["--batch-size", "2", "--eval-batches", "1", "--eval-every", "0", "--quiet"]
ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory, registry):
    """Inputs every command here reads: a spec, a text, a training checkpoint, a Hugging Face directory."""
    root = tmp_path_factory.mktemp("world")
    (root / "spec.toml").write_text(SPEC)
    (root / "play.txt").write_text(small_play())
    assert main(["train", str(root / "spec.toml"), "--data", str(root / "play.txt"), "--steps", "2", *FAST,
                 "--out", str(root / "ckpt")]) == 0
    export_hf(randomized(blockspec.build(gpt2_spec(registry), registry=registry, seed=1)), root / "hf")
    return root


def tree(path: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every entry under ``path`` (or the file itself): bytes (None for a directory) and mode."""
    if not path.is_dir():
        return {".": (path.read_bytes(), path.stat().st_mode)}
    entries = {".": (None, path.stat().st_mode)}
    for item in sorted(path.rglob("*")):
        entries[str(item.relative_to(path))] = (None if item.is_dir() else item.read_bytes(), item.stat().st_mode)
    return entries


# ---------------------------------------------------------------- 1. silent replacement


def test_save_refuses_an_existing_checkpoint_unless_overwrite(registry, tmp_path):
    first = randomized(blockspec.build(gpt2_spec(registry), registry=registry, seed=0))
    second = randomized(blockspec.build(gpt2_spec(registry), registry=registry, seed=0), seed=3)
    target = save(first, tmp_path / "ckpt")
    before = tree(target)
    with pytest.raises(OutputExistsError, match=r"ckpt: already exists; pass overwrite=True to replace it"):
        save(second, target)
    assert tree(target) == before
    save(second, target, overwrite=True)
    assert torch.equal(load(target, registry=registry).embedding.weight, second.embedding.weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


@pytest.mark.parametrize("noreplace", [True, False], ids=["renameat2", "rename-fallback"])
def test_a_writer_that_lands_while_another_writes_wins_and_the_other_is_refused(registry, tmp_path, monkeypatch,
                                                                                 noreplace):
    """Both pass the early check; B lands between A's check and A's rename: A must not replace B."""
    if not noreplace:
        monkeypatch.setattr(atomic, "rename_noreplace", lambda source, target: False)
    a = randomized(blockspec.build(gpt2_spec(registry), registry=registry, seed=0))
    b = randomized(blockspec.build(gpt2_spec(registry), registry=registry, seed=0), seed=4)
    target = tmp_path / "ckpt"
    real_sync, landed = atomic.sync_tree, []

    def sync_then_let_b_land(root):
        real_sync(root)
        if not landed:
            landed.append(True)
            save(b, target)

    monkeypatch.setattr(atomic, "sync_tree", sync_then_let_b_land)
    with pytest.raises(OutputExistsError, match="already exists; pass overwrite=True"):
        save(a, target)
    assert torch.equal(load(target, registry=registry).embedding.weight, b.embedding.weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


RACER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import blockspec
    from blockspec.errors import BlockspecError
    from tests.weights_helpers import gpt2_spec, randomized
    root, seed, rounds = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    registry = blockspec.load_registry()
    model = randomized(blockspec.build(gpt2_spec(registry), registry=registry, seed=0), seed=seed)
    (root / f"ready-{seed}").touch()
    while not (root / "go").exists():
        time.sleep(0.001)
    results = []
    for index in range(rounds):
        try:
            blockspec.save(model, root / f"race-{index}")
            results.append("saved")
        except BlockspecError as error:
            results.append(str(error))
    print(json.dumps(results))
""")


def test_two_processes_saving_to_one_new_path_exactly_one_wins(registry, tmp_path):
    rounds, seeds = 6, (11, 12)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path), str(seed), str(rounds)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for seed in seeds]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{seed}").exists() for seed in seeds):
        assert time.monotonic() < deadline and all(r.poll() is None for r in racers), [r.communicate() for r in racers]
        time.sleep(0.01)
    (tmp_path / "go").touch()
    results = []
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err
        results.append(json.loads(out))
    for index in range(rounds):
        outcomes = [r[index] for r in results]
        assert sorted(outcomes)[1] == "saved" and outcomes.count("saved") == 1, outcomes
        loser = next(o for o in outcomes if o != "saved")
        assert (loser.endswith(f"race-{index}: already exists; pass overwrite=True to replace it")  # came second
                or f"race-{index}: is being written by another blockspec process (pid " in loser), loser  # overlapped
        winner = seeds[outcomes.index("saved")]
        expected = randomized(blockspec.build(gpt2_spec(registry), registry=registry, seed=0), seed=winner)
        assert torch.equal(load(tmp_path / f"race-{index}", registry=registry).embedding.weight,
                           expected.embedding.weight)
    assert not list(tmp_path.glob(".race-*"))  # no staging left behind


def test_export_hf_and_training_checkpoints_refuse_too(registry, world, tmp_path):
    before = tree(world / "hf")
    with pytest.raises(OutputExistsError):
        export_hf(randomized(blockspec.build(gpt2_spec(registry), registry=registry)), world / "hf")
    assert tree(world / "hf") == before
    checkpoint = checkpointing.load_checkpoint(world / "ckpt")
    before = tree(world / "ckpt")
    with pytest.raises(OutputExistsError):
        checkpointing.save_checkpoint(world / "ckpt", checkpoint)
    assert tree(world / "ckpt") == before


KINDS = ("file", "foreign", "checkpoint", "input")
COMMANDS = ("train", "import-hf", "export-hf", "export")


def make_target(kind: str, root: Path, world: Path, command: str) -> Path:
    if kind == "file":
        (root / "t").write_bytes(b"precious\n")
    elif kind == "foreign":
        (root / "t").mkdir()
        (root / "t" / "notes.txt").write_text("precious")
    elif kind == "checkpoint":
        shutil.copytree(world / "ckpt", root / "t")
    else:  # the command's own input
        source = {"train": "play.txt", "import-hf": "hf", "export-hf": "ckpt", "export": "ckpt"}[command]
        shutil.copytree(world / source, root / "t") if (world / source).is_dir() else \
            shutil.copy(world / source, root / "t")
    return root / "t"


def spelled(path: Path, how: str) -> str:
    return {"plain": str(path), "slash": f"{path}/", "dotdot": f"{path.parent}/x/../{path.name}",
            "dot": f"{path.parent}/./{path.name}"}[how]


def command_line(command: str, target: str, kind: str, world: Path, root: Path) -> list[str]:
    source = root / "t"  # for kind "input", the target is the command's input
    train = ["train", str(world / "spec.toml"), "--steps", "1", *FAST]
    if command == "train":
        data = str(source) if kind == "input" else str(world / "play.txt")
        return [*train, "--data", data, "--out" if kind != "input" else "--plot", target]
    reads = source if kind == "input" else world / {"import-hf": "hf", "export-hf": "ckpt", "export": "ckpt"}[command]
    extra = ["--weights-only"] if command == "export" else []
    return [command, str(reads), *extra, "--out", target]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(COMMANDS), kind=st.sampled_from(KINDS), force=st.booleans(),
       how=st.sampled_from(["plain", "slash", "dotdot", "dot"]))
def test_no_command_writes_over_an_existing_output_or_its_input(world, capsys, monkeypatch, command, kind, force,
                                                                 how):
    """Without --force every existing target is refused; with it, files, foreign directories and
    the command's own input still are. Always exit 2, one line, the target byte-identical, no training."""
    own_kind = kind == "checkpoint" and command != "export-hf"  # export-hf writes an export, never a checkpoint
    if force and own_kind:
        return  # replacing is what --force asks for
    if how == "slash" and kind == "file" or (how == "slash" and kind == "input" and command == "train"):
        how = "plain"  # "file/" is not a spelling of a file
    started = []
    monkeypatch.setattr(Trainer, "run", lambda self, **kw: started.append(True))
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        (root / "x").mkdir()
        target = make_target(kind, root, world, command)
        before = tree(target)
        argv = command_line(command, spelled(target, how), kind, world, root) + (["--force"] if force else [])
        code, out, err = run(capsys, *argv)
        assert code == 2, (argv, out, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("blockspec: error: "), err
        assert "overwrite=True" not in err
        assert ("--force" in err) == own_kind, err
        assert tree(target) == before and not started
        assert sorted(p.name for p in root.iterdir()) == ["t", "x"]


def test_resume_into_its_own_checkpoint_is_the_one_natural_exception(world, tmp_path, capsys):
    shutil.copytree(world / "ckpt", tmp_path / "ckpt")
    code, _, err = run(capsys, "train", world / "spec.toml", "--data", world / "play.txt", "--steps", "3", *FAST,
                       "--resume", tmp_path / "ckpt", "--out", f"{tmp_path}/./ckpt")
    assert code == 0, err
    assert checkpointing.load_checkpoint(tmp_path / "ckpt").step == 3


# ---------------------------------------------------------------- 2. refusals before the work


@pytest.fixture
def no_training(monkeypatch):
    started = []
    monkeypatch.setattr(Trainer, "run", lambda self, **kw: started.append(True))
    return started


@pytest.mark.parametrize("problem", ["foreign-out", "plot-suffix", "plot-parent-is-file", "no-matplotlib",
                                     "plot-exists"])
def test_every_output_is_checked_before_step_one(world, tmp_path, capsys, monkeypatch, no_training, problem):
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("x")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "old.png").write_bytes(PNG_SIGNATURE + b"old")
    args = {"foreign-out": ["--out", tmp_path / "foreign"], "plot-suffix": ["--plot", tmp_path / "x.jpgg"],
            "plot-parent-is-file": ["--plot", tmp_path / "afile" / "sub" / "x.png"],
            "no-matplotlib": ["--plot", tmp_path / "x.png"], "plot-exists": ["--plot", tmp_path / "old.png"]}[problem]
    if problem == "no-matplotlib":
        monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err = run(capsys, "train", world / "spec.toml", "--data", world / "play.txt", "--steps", "1", *FAST,
                         *args)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert not no_training and out == ""
    expected = {"foreign-out": "not a blockspec checkpoint", "plot-suffix": "expected a file ending in .png",
                "plot-parent-is-file": "afile' is not a folder", "no-matplotlib": "needs matplotlib",
                "plot-exists": "old.png: already exists; pass --force to replace it"}[problem]
    assert expected in err


def test_a_plot_in_a_missing_folder_is_refused_before_training(world, tmp_path, capsys):
    code, out, err = run(capsys, "train", world / "spec.toml", "--data", world / "play.txt", "--steps", "1", *FAST,
                         "--plot", tmp_path / "nodir" / "sub" / "x.png")
    assert code == 2 and out == "" and "does not exist; create it first" in err, err
    assert not (tmp_path / "nodir").exists()


def test_resume_without_out_writes_back_to_the_resumed_checkpoint(world, tmp_path, capsys):
    shutil.copytree(world / "ckpt", tmp_path / "ckpt")
    code, out, err = run(capsys, "train", world / "spec.toml", "--data", world / "play.txt", "--steps", "4", *FAST,
                         "--resume", tmp_path / "ckpt", "--json")
    assert code == 0, err
    assert json.loads(out)["checkpoint"] == str(tmp_path / "ckpt")
    assert checkpointing.load_checkpoint(tmp_path / "ckpt").step == 4


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(out=st.sampled_from(["none", "new", "nested-new", "checkpoint", "foreign", "file"]),
       plot=st.sampled_from(["none", "x.png", "x.svg", "x.jpgg", "x", "deep/x.png", "afile/x.png", "exists.png"]),
       force=st.booleans())
def test_train_refuses_before_training_or_writes_every_output(world, capsys, monkeypatch, out, plot, force):
    real_run, started = Trainer.run, []

    def counting_run(self, **kwargs):
        started.append(True)
        return real_run(self, **kwargs)

    monkeypatch.setattr(Trainer, "run", counting_run)
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        (root / "afile").write_text("x")
        (root / "exists.png").write_bytes(PNG_SIGNATURE + b"old")  # a picture: --force may replace it
        (root / "foreign").mkdir()
        (root / "foreign" / "n.txt").write_text("x")
        (root / "file").write_text("x")
        shutil.copytree(world / "ckpt", root / "checkpoint")
        out_path = {"none": None, "new": root / "new", "nested-new": root / "a" / "b", "checkpoint": root / "checkpoint",
                    "foreign": root / "foreign", "file": root / "file"}[out]
        plot_path = None if plot == "none" else root / plot
        argv = ["train", world / "spec.toml", "--data", world / "play.txt", "--steps", "1", *FAST]
        argv += ["--out", out_path] if out_path else []
        argv += ["--plot", plot_path] if plot_path else []
        argv += ["--force"] if force else []
        code, _, err = run(capsys, *argv)
        if code == 2:
            assert not started and len(err.strip().splitlines()) == 1, err
        else:
            assert code == 0 and started, err
            if out_path:
                assert checkpointing.load_checkpoint(out_path).step == 1
            if plot_path:
                assert plot_path.stat().st_size > 100


# ---------------------------------------------------------------- 6. modes


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request):
    old = os.umask(request.param)
    outputs.current_umask.cache_clear()
    yield request.param
    os.umask(old)
    outputs.current_umask.cache_clear()


def test_written_files_and_directories_honour_the_umask(registry, tmp_path, umask):
    from blockspec.inspect.explore.page import write_page

    model = randomized(blockspec.build(gpt2_spec(registry), registry=registry, seed=0))
    checkpoint, exported = save(model, tmp_path / "ckpt"), export_hf(model, tmp_path / "hf")
    page = write_page({"stages": []}, tmp_path / "page.html")
    (tmp_path / "plain.txt").write_text("x")
    (tmp_path / "plain").mkdir()
    file_mode, dir_mode = (tmp_path / "plain.txt").stat().st_mode & 0o777, (tmp_path / "plain").stat().st_mode & 0o777
    assert file_mode == 0o666 & ~umask and dir_mode == 0o777 & ~umask
    for directory in (checkpoint, exported):
        assert directory.stat().st_mode & 0o777 == dir_mode
        for path in directory.iterdir():
            assert path.stat().st_mode & 0o777 == file_mode, path
    assert page.stat().st_mode & 0o777 == file_mode


# ---------------------------------------------------------------- 7. generation without the optimizer


def test_generate_needs_neither_optimizer_nor_history(world, tmp_path, capsys):
    shutil.copytree(world / "ckpt", tmp_path / "ckpt")
    code, expected, err = run(capsys, "generate", tmp_path / "ckpt", "--prompt", "the", "--max-new-tokens", "5")
    assert code == 0, err
    for name in TRAINING_FILES:
        (tmp_path / "ckpt" / name).unlink()
    code, out, err = run(capsys, "generate", tmp_path / "ckpt", "--prompt", "the", "--max-new-tokens", "5")
    assert code == 0 and out == expected, err
    code, _, err = run(capsys, "train", world / "spec.toml", "--data", world / "play.txt", "--steps", "3", *FAST,
                       "--resume", tmp_path / "ckpt")
    assert code == 2 and ("optimizer.safetensors" in err or "training.json" in err), err


def test_present_training_files_are_still_checked_and_other_files_still_required(world, tmp_path, registry):
    shutil.copytree(world / "ckpt", tmp_path / "ckpt")
    optimizer = tmp_path / "ckpt" / "optimizer.safetensors"
    optimizer.write_bytes(optimizer.read_bytes()[:-1])
    with pytest.raises(CheckpointError, match="optimizer.safetensors: .* bytes, the manifest records"):
        load(tmp_path / "ckpt", registry=registry)
    shutil.copytree(world / "ckpt", tmp_path / "c2")
    (tmp_path / "c2" / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="tokenizer.json: listed in the manifest but missing"):
        load(tmp_path / "c2", registry=registry)


def test_export_weights_only_writes_a_fresh_checkpoint_without_the_training_files(world, tmp_path, capsys, registry):
    code, out, err = run(capsys, "export", world / "ckpt", "--weights-only", "--out", tmp_path / "w")
    assert code == 0, err
    assert "dropped: optimizer.safetensors, training.json" in out
    manifest = read_checkpoint_manifest(tmp_path / "w")
    assert not TRAINING_FILES & manifest.files.keys() and "tokenizer.json" in manifest.files
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["manifest.json", "model.safetensors", "spec.toml",
                                                                 "tokenizer.json"]
    original, stripped = load(world / "ckpt", registry=registry), load(tmp_path / "w", registry=registry)
    assert all(torch.equal(a, b) for a, b in zip(original.state_dict().values(), stripped.state_dict().values()))
    code, out, err = run(capsys, "generate", tmp_path / "w", "--prompt", "the", "--max-new-tokens", "5")
    assert code == 0, err
    with pytest.raises(CheckpointError, match="is not a training checkpoint"):
        checkpointing.load_checkpoint(tmp_path / "w", registry)


def test_the_training_files_load_tolerates_are_the_ones_training_writes():
    assert TRAINING_FILES == {checkpointing.OPTIMIZER_FILE, checkpointing.TRAINING_FILE}


def test_check_writable_target_refuses_the_input_by_inode(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "manifest.json").write_text("{}")
    (tmp_path / "link").symlink_to(tmp_path / "ckpt")
    for spelling in (tmp_path / "link", tmp_path / "ckpt" / ".." / "ckpt", tmp_path):
        with pytest.raises(CheckpointError, match="input"):
            check_writable_target(spelling, kind=CHECKPOINT, overwrite=True, inputs=[tmp_path / "ckpt"])
    assert hashlib.sha256((tmp_path / "ckpt" / "manifest.json").read_bytes()).hexdigest()
