"""A sweep folder's record of its runs, so that a sweep can grow in it without training anything twice.

``DIR/sweep.json`` holds the sweep's base (its spec, its data, the settings that change what a run
learns or reports) and every run the folder holds: its values, its seed and its key (a hash of the
base and the values). A sweep command reuses each run whose key and seed are its own (finished:
read back; short of ``--steps``: continued from its checkpoint), trains what is new, and keeps the
folder's other runs as they are. Before any work it refuses, unless ``force``, a changed base and
any run it would have to train again; ``force`` then retrains those runs one at a time, each removed
only just before it is trained again, and nothing else in the folder is touched.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import shutil
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from attrs import frozen

from blockspec.checkpoint.directory import read_extra_file
from blockspec.errors import BlockspecError, Problem
from blockspec.outputs.atomic_file import write_atomically
from blockspec.outputs.failures import output_errors
from blockspec.outputs.kinds import directory_kind
from blockspec.train.checkpointing import TRAINING_FILE, saved_step
from blockspec.train.loop import TrainConfig

if TYPE_CHECKING:
    from blockspec.train.sweep import Variant

PLAN_FILE = "sweep.json"
RUNS = "runs"
# what a sweep may continue in, or ``--force`` retrain the runs of: a folder with its sweep.json
SWEEP = directory_kind("a sweep folder", markers=(PLAN_FILE,))
DIVERGED_SUFFIX, DIVERGED_FILE = ".diverged", "divergence.json"  # runs/NN-...-seedS.diverged/divergence.json
FORMAT = "blockspec-sweep"
VERSION = 2  # 1: one plan, resumed only by the very same command (read still: its runs become records)
# settings that are not the run's identity: steps grow, the seed is each run's own, and micro-batches and
# compiling change memory and speed, not what is learned (within float rounding: docs/training.md)
NOT_IDENTITY = ("seed", "steps", "grad_accum", "compile")


class SweepError(BlockspecError, ValueError):
    """A --vary key or value the spec cannot take, or an output folder that holds a different sweep."""


@frozen
class Job:
    """One run of this command: where it lives, and whether its old run there is retrained (``force``)."""

    variant: Variant
    seed: int
    directory: Path
    redo: bool = False


@frozen
class Folder:
    """The sweep folder's record as this command leaves it: the plan, and every run's record by name."""

    path: Path
    plan: dict[str, Any]
    records: dict[str, dict[str, Any]]

    def write(self) -> None:
        """sweep.json, atomically: the plan with every record (a record is written before its run trains)."""
        write_atomically(self.path / PLAN_FILE, json.dumps({**self.plan, "runs": self.records}, indent=1) + "\n")


# ---------------------------------------------------------------- identity


def parse_value(text: str) -> Any:
    """A --vary value as TOML would read it (16 -> int, true -> bool, 1e-3 -> float), else the text itself."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text.strip()


def run_name(index: int, values: Mapping[str, Any], seed: int) -> str:
    """A folder name per run: its index (unique) and its values, made safe for any file system."""
    text = "_".join(f"{k.split('.', 1)[1] if k.endswith('.use') else k}-{v}" for k, v in values.items())
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:80] or "base"
    return f"{index:02d}-{safe}-seed{seed}"


def sweep_base(spec: dict[str, Any], data: str | Path, config: TrainConfig) -> dict[str, Any]:
    """What every run of a sweep shares and a run's results depend on: spec, data, result settings."""
    settings = {k: v for k, v in attrs.asdict(config).items() if k not in NOT_IDENTITY}
    return {"spec": spec, "data": str(Path(data).resolve()), "settings": settings}


def run_key(base: Mapping[str, Any], values: Mapping[str, Any]) -> str:
    """A run's identity, with its seed: the base and its varied values (in any order)."""
    text = json.dumps({"base": base, "values": values}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def plan_document(source: str, base: dict[str, Any], vary: Mapping[str, Sequence[str]], seeds: Sequence[int],
                  steps: int) -> dict[str, Any]:
    """What sweep.json records of this command, beside the runs' records."""
    return {"format": FORMAT, "version": VERSION, "spec_file": source, **base, "steps": steps,
            "vary": {k: list(v) for k, v in vary.items()}, "seeds": list(seeds)}


def read_plan(folder: Path) -> dict[str, Any] | None:
    """The folder's sweep.json (None: the folder is new or empty; {}: it cannot be read)."""
    if not folder.exists() or not any(folder.iterdir()):
        return None
    try:
        plan = json.loads((folder / PLAN_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return plan if isinstance(plan, dict) else {}


def old_base_and_records(old: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """An old sweep.json's base and run records; a version-1 plan's runs are derived from its vary and seeds."""
    if old.get("version") == VERSION:
        return {k: old.get(k) for k in ("spec", "data", "settings")}, dict(old.get("runs") or {})
    if old.get("version") != 1:
        return {}, {}
    settings = {k: v for k, v in (old.get("settings") or {}).items() if k not in NOT_IDENTITY}
    base = {"spec": old.get("spec"), "data": str(Path(str(old.get("data"))).resolve()), "settings": settings}
    return base, _version_one_records(base, old.get("vary") or {}, old.get("seeds") or [])


def _version_one_records(base: dict[str, Any], vary: Mapping[str, Sequence[str]],
                         seeds: Sequence[int]) -> dict[str, dict[str, Any]]:
    records = {}
    keys = list(vary)
    for index, combination in enumerate(itertools.product(*(list(map(parse_value, vary[k])) for k in keys))):
        values = dict(zip(keys, combination))
        for seed in seeds:
            records[run_name(index, values, seed)] = {"values": values, "seed": seed, "key": run_key(base, values)}
    return records


def base_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs between two bases, as a refusal names it (a setting as ``{name}``, its flag on the CLI)."""
    changes = [what for key, what in (("spec", "the base spec"), ("data", "the data")) if old.get(key) != new[key]]
    old_settings, new_settings = old.get("settings") or {}, new["settings"]
    changes += [f"{{{k}}}" for k in new_settings if old_settings.get(k) != new_settings[k]]
    return changes


# ---------------------------------------------------------------- the plan of this command


def plan_jobs(folder: Path, variants: Sequence[Variant], seeds: Sequence[int], steps: int, base: dict[str, Any],
              plan: dict[str, Any], *, force: bool, schedule_stretches: bool) -> tuple[list[Job], Folder]:
    """Each run of this command, reused, continued, new or (``force``) retrained; refused before any work
    when the folder holds another base or a run that would have to be trained again and not ``force``."""
    old = read_plan(folder)
    old_base, records = old_base_and_records(old) if old is not None else ({}, {})
    if old is not None and not force:
        _refuse_changed_base(folder, base_changes(old_base, base))
    by_key = {(r.get("key"), r.get("seed")): name for name, r in records.items()}
    jobs: list[Job] = []
    problems: list[Problem] = []
    for variant, seed in ((v, s) for v in variants for s in seeds):
        key = run_key(base, variant.values)
        name = by_key.get((key, seed)) or _new_name(variants, variant, seed, {j.directory.name for j in jobs})
        why = _why_redo(folder / RUNS / name, records.get(name), key, steps, schedule_stretches)
        problems += [why] if why is not None else []
        jobs.append(Job(variant, seed, folder / RUNS / name, redo=why is not None))
        if why is None:
            records[name] = {"values": variant.values, "seed": seed, "key": key}
    if problems and not force:
        _refuse_redo(problems)
    return jobs, Folder(folder, plan, records)


def _new_name(variants: Sequence[Variant], variant: Variant, seed: int, taken: set[str]) -> str:
    """The run's folder name by its variant's place; past the variants' numbers when another run has it."""
    name, number = run_name(variants.index(variant), variant.values, seed), len(variants)
    while name in taken:  # two values that print alike ("1" and 1): a name each
        name, number = run_name(number, variant.values, seed), number + 1
    return name


def _why_redo(directory: Path, record: dict[str, Any] | None, key: str, steps: int,
              schedule_stretches: bool) -> Problem | None:
    """Why the run at ``directory`` cannot be this command's run as it is (None: it can, or there is none)."""
    step, place = saved_step(directory), str(directory)
    if step is None:
        if directory.exists():  # not a checkpoint: no force removes it
            raise SweepError(Problem(file=place, message="is not a run's checkpoint",
                                     hint="remove it yourself, or choose a new --out"))
        return None
    if record is None or record.get("key") != key:
        return Problem(file=place, message="was trained with another base" if record else
                       f"is a run that {PLAN_FILE} does not record", hint="pass {force} to retrain it")
    if step > steps:
        return Problem(file=place, path="$.steps", expected=f"a total of at least {step} steps (the run is at step "
                       f"{step})", found=str(steps), hint=f"pass {{steps}} {step} or more (the total to reach), "
                       "or {force} to retrain it to " + str(steps))
    planned = _planned_steps(directory)
    if not schedule_stretches and planned != steps:
        return Problem(file=place, path="$.steps", message=f"the run's learning rate decays over {planned} steps "
                       f"({{min_lr}}); continued to {steps} it would not be the {steps}-step run",
                       hint=f"pass {{steps}} {planned}, or {{force}} to retrain it over {steps}")
    return None


def _planned_steps(directory: Path) -> int:
    return int(json.loads(read_extra_file(directory, TRAINING_FILE))["config"]["steps"])


NAMES = {"steps": "steps", "force": "force=True", "min_lr": "min_lr"}  # the library's spelling; the CLI says flags


def _refuse_changed_base(folder: Path, changes: list[str]) -> None:
    if changes:
        names = {c[1:-1]: c[1:-1] for c in changes if c.startswith("{")} | NAMES
        raise SweepError(Problem(
            file=str(folder), message=f"holds a sweep of another base ({', '.join(changes)} differ), whose runs "
            "would not compare with these", names=names,
            hint="pass {force} to train this sweep's runs anew (the folder's other runs and files stay), "
                 "or choose a new --out"))


def _refuse_redo(problems: list[Problem]) -> None:
    """The first run this command would have to train again, and how many more there are."""
    first = problems[0]
    more = f" (and {len(problems) - 1} more runs)" if len(problems) > 1 else ""
    raise SweepError(attrs.evolve(first, message=first.message + more, names=NAMES))


def redo(folder: Folder, job: Job, key: str) -> None:
    """Before ``job`` trains again (``force``): remove its old run and divergence record, then record the new
    one; a stop between the two leaves a record with no run, which a rerun trains from step 0."""
    with output_errors(job.directory):
        for path in (job.directory, divergence_record(job.directory)):
            if path.exists():
                shutil.rmtree(path)
    folder.records[job.directory.name] = {"values": job.variant.values, "seed": job.seed, "key": key}
    folder.write()


def divergence_record(directory: Path) -> Path:
    """Where a diverged run's record lives: beside its checkpoint, under runs/."""
    return directory.with_name(f"{directory.name}{DIVERGED_SUFFIX}")
