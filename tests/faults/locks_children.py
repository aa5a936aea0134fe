"""The other processes of the lock tests: a writer that holds its folder until told to go on, and writers and
readers that replace or load one checkpoint in a loop.

Run as ``python -m tests.faults.locks_children WHAT ...`` from the repository root; a child that waits
touches READY once it holds its folder and goes on when RELEASE exists (or is killed).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

WAIT_LIMIT = 120.0  # seconds a holding child waits for RELEASE before giving up on its parent


def held_at(module: Any, name: str, ready: Path, release: Path) -> None:
    """Patch ``module.name`` so its first call signals ``ready`` and waits for ``release``, then goes on."""
    real: Callable[..., Any] = getattr(module, name)

    def holding(*args: Any, **kwargs: Any) -> Any:
        if not ready.exists():
            ready.touch()
            deadline = time.monotonic() + WAIT_LIMIT
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        return real(*args, **kwargs)

    setattr(module, name, holding)


def hold_sweep(ready: str, release: str, *argv: str) -> int:
    """``blockspec sweep ARGV``, held before its first run (the sweep folder is then its own)."""
    import blockspec.train.sweep as sweep
    from blockspec.cli import main

    held_at(sweep, "train_run", Path(ready), Path(release))
    return main(list(argv))


def hold_prepare(ready: str, release: str, *argv: str) -> int:
    """``blockspec data prepare ARGV``, held before it writes the first token."""
    import blockspec.data.prepared as prepared
    from blockspec.cli import main

    held_at(prepared, "_write", Path(ready), Path(release))
    return main(list(argv))


def hold_train(ready: str, release: str, *argv: str) -> int:
    """``blockspec train ARGV``, held before its first step (its --out is then its own)."""
    from blockspec.cli import main
    from blockspec.train.loop import Trainer

    held_at(Trainer, "run", Path(ready), Path(release))
    return main(list(argv))


def tiny_model(seed: int) -> Any:
    import torch

    import blockspec

    from ..specs import spec_text

    torch.set_num_threads(1)
    registry = blockspec.load_registry()
    spec = blockspec.loads_spec(spec_text(vocab_size=64, context_length=16, d_model=32, n_layers=2, n_heads=4,
                                          d_ff=64), registry)
    return blockspec.build(spec, registry=registry, seed=seed)


def hold_save(ready: str, release: str, path: str) -> int:
    """``blockspec.save(..., overwrite=True)`` to ``path``, held before it writes the weights."""
    import blockspec
    import blockspec.checkpoint.directory as directory

    model = tiny_model(7)
    held_at(directory, "write_file", Path(ready), Path(release))
    blockspec.save(model, path, overwrite=True)
    return 0


def replace_loop(path: str, until: str, report: str, mode: str = "exchange") -> int:
    """Replace the checkpoint at ``path`` ``until`` (seconds, or until a file exists), alternating two models
    so that consecutive saves differ.

    Writes a JSON report: saves done, saves refused by another writer's lock (with the pids named),
    and any other error (there must be none). ``mode`` "fallback" replaces as on a file system without
    renameat2's exchange (rename the old tree aside, then the new one in).
    """
    import blockspec
    import blockspec.checkpoint.atomic as atomic
    from blockspec.errors import BlockspecError

    if mode == "fallback":
        atomic.exchange = lambda first, second: False

    models = [tiny_model(1), tiny_model(2)]
    saved, refused, other, named = 0, 0, [], set()
    for _ in _until_saved(until, lambda: saved > 0):
        try:
            blockspec.save(models[saved % 2], path, overwrite=True)
            saved += 1
        except BlockspecError as error:
            if "is being written by another blockspec process" in str(error):
                refused += 1
                named.add(str(error).rsplit("pid ", 1)[-1].split(")")[0])
            else:
                other.append(str(error))
        except Exception as error:  # reported to the parent, which asserts there were none
            other.append(f"{type(error).__name__}: {error}")
    Path(report).write_text(json.dumps({"saved": saved, "refused": refused, "other": other[:5],
                                        "named": sorted(named)}))
    return 0


def replace_training_loop(path: str, first: str, second: str, until: str, report: str) -> int:
    """Replace the training checkpoint at ``path`` with ``first`` and ``second`` in turn, ``until`` (as above)."""
    from blockspec.train.checkpointing import load_checkpoint, save_checkpoint

    checkpoints, saved = [load_checkpoint(first), load_checkpoint(second)], 0
    for _ in _until(until):
        save_checkpoint(path, checkpoints[saved % 2], overwrite=True)
        saved += 1
    Path(report).write_text(json.dumps({"saved": saved}))
    return 0


def resume_loop(path: str, first: str, second: str, seconds: str, report: str) -> int:
    """Read the training checkpoint at ``path`` for ``seconds`` as a resume does; each read must be one save:
    its weights, optimizer moments and history all of the step its training.json names."""
    from blockspec.train.checkpointing import load_checkpoint

    known = {c.step: _fingerprint(c) for c in map(load_checkpoint, (first, second))}
    reads, mixed, deadline = 0, [], time.monotonic() + float(seconds)
    while time.monotonic() < deadline:
        checkpoint = load_checkpoint(path)
        reads += 1
        if _fingerprint(checkpoint) != known.get(checkpoint.step):
            mixed.append(checkpoint.step)
    Path(report).write_text(json.dumps({"reads": reads, "mixed": len(mixed)}))
    return 0


def _fingerprint(checkpoint: Any) -> list[float]:
    """What a save's parts say of it: the weights' sum, the moments' sum, the history's length."""
    states = checkpoint.optimizer_state["state"]
    moments = sum(float(states[n][k].sum()) for n in sorted(states) for k in sorted(states[n]))
    weights = sum(float(checkpoint.model_state[n].sum()) for n in sorted(checkpoint.model_state))
    return [round(weights, 6), round(moments, 6), len(checkpoint.training["history"]["train"])]


def load_loop(path: str, seconds: str, report: str) -> int:
    """Load the checkpoint at ``path`` for ``seconds``; write a JSON report of the loads and their errors."""
    import blockspec

    loads, errors, deadline = 0, [], None
    while deadline is None or time.monotonic() < deadline:
        try:
            blockspec.load(path)
            loads += 1
        except Exception as error:  # reported to the parent, which asserts there were none
            errors.append(f"{type(error).__name__}: {error}")
        deadline = deadline or time.monotonic() + float(seconds)  # counted from the end of the first (slow) load
    Path(report).write_text(json.dumps({"loads": loads, "errors": len(errors), "first": errors[:3]}))
    return 0


# ---------------------------------------------------------------- the parent's side

PRELOAD = ["torch", "torch._dynamo", "blockspec.cli", "blockspec.train.sweep", "blockspec.data.prepared",
           "tests.faults.locks_children"]


def _context() -> Any:
    """Children fork from a server that imported torch and blockspec once: seconds each, saved."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _exit_with(what: str, *argv: str) -> None:
    sys.exit(CHILDREN[what](*argv))


class Child:
    """A child process running one of CHILDREN; ``pid``, ``wait`` for its exit code, ``kill`` it."""

    def __init__(self, what: str, *argv: str) -> None:
        self.process = _context().Process(target=_exit_with, args=(what, *argv))
        self.process.start()
        self.pid = self.process.pid

    def wait(self, timeout: float = 120.0) -> int | None:
        self.process.join(timeout)
        return self.process.exitcode

    def kill(self) -> None:
        self.process.kill()
        self.process.join()


class Holder(Child):
    """A child that holds a folder: waited for until READY, then released or killed."""

    def __init__(self, folder: Path, what: str, *argv: str) -> None:
        self.ready, self.release = folder / f".{what}-ready", folder / f".{what}-release"
        super().__init__(what, str(self.ready), str(self.release), *argv)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            assert self.process.is_alive() and time.monotonic() < deadline, "the holder never got ready"
            time.sleep(0.02)

    def finish(self, timeout: float = 120.0) -> int | None:
        self.release.touch()
        return self.wait(timeout)


def tree_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative name: what "byte-identical" compares."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _until(until: str) -> Iterator[None]:
    """Loop for ``until`` seconds, or (a path) until that file exists, at most WAIT_LIMIT seconds."""
    seconds = float(until) if until.replace(".", "", 1).isdigit() else WAIT_LIMIT
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (seconds == WAIT_LIMIT and Path(until).exists()):
        yield


def _until_saved(until: str, saved_once: Callable[[], bool]) -> Iterator[None]:
    """``_until(until)``, then on (at most WAIT_LIMIT seconds) until this writer has saved once: on a loaded
    machine the writer that starts second can be refused for the whole race, which proves nothing."""
    yield from _until(until)
    deadline = time.monotonic() + WAIT_LIMIT
    while not saved_once() and time.monotonic() < deadline:
        yield


CHILDREN = {"sweep": hold_sweep, "train": hold_train, "prepare": hold_prepare, "save": hold_save, "replace": replace_loop, "replace-training": replace_training_loop, "resume": resume_loop,
            "load": load_loop}

if __name__ == "__main__":
    sys.exit(CHILDREN[sys.argv[1]](*sys.argv[2:]))
