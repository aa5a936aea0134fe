"""Ablation sweeps: every combination of varied spec values, times seeds, on the same batch sequence.

Batches are a pure function of (seed, step) (data/dataset.py), so two variants trained with the
same seed see the same text in the same order: their difference is the spec's, not the data's.
Each run is an ordinary training checkpoint under ``DIR/runs/``; ``DIR/sweep.json`` records the
plan, so rerunning the same command resumes (finished runs skipped, unfinished ones continued
from their checkpoint) and a different command is refused unless ``force``.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch
from attrs import frozen

from blockspec.assembly.counting import count_parameters
from blockspec.checkpoint.atomic import atomic_directory
from blockspec.checkpoint.directory import read_extra_file
from blockspec.outputs.atomic_file import write_atomically
from blockspec.outputs.failures import output_errors
from blockspec.outputs.targets import check_writable_target
from blockspec.errors import BlockspecError, Problem
from blockspec.outputs.lock import folder_lock
from blockspec.registry.components import Registry
from blockspec.registry.specs import structure_spec
from blockspec.spec.convert import spec_to_dict
from blockspec.spec.schema import ModelSpec
from blockspec.train import loop
from blockspec.data.dataset import Dataset
from blockspec.sources import open_source
from blockspec.train.checkpointing import TRAINING_FILE, load_checkpoint, saved_step
from blockspec.train.distributed import World
from blockspec.train.plot import save_figure
from blockspec.train.finite import DivergedError
from blockspec.train.interrupt import Interrupted
from blockspec.train.sweep_folder import (DIVERGED_FILE, RUNS, SWEEP, Folder, Job, SweepError, divergence_record,
                                          parse_value, plan_document, plan_jobs, redo, run_key, sweep_base)
from blockspec.train.sweep_folder import DIVERGED_SUFFIX, PLAN_FILE, run_name  # noqa: F401 (the folder's names, here too)
from blockspec.train.run import (Run, check_head, check_memory, execute, model_tokenizer, open_data, run_config,
                                 start, tokens_per_s)

MAX_RUNS = 10_000  # variants × seeds: each a training run, so more is a typo (and each variant is built to check it)


@frozen
class Variant:
    """One combination of the varied values, and the validated spec it gives."""

    values: dict[str, Any]  # dotted key -> value, in --vary order
    spec: ModelSpec
    parameters: int

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.values.items()) or "base"


@frozen
class RunResult:
    variant: Variant
    seed: int
    directory: Path
    history: loop.History
    tokens_per_s: float
    skipped: bool  # finished (or diverged) before this call
    continued_from: int | None = None  # the step its checkpoint was at when this call continued it
    diverged: str | None = None  # "diverged at step 3 of 600: the loss is nan"; None for a run that trained


@frozen
class SweepResult:
    runs: list[RunResult]
    rows: list[dict[str, Any]]  # one per variant, as in results.csv
    files: list[Path]
    note: str | None  # why no plot, if none


# ---------------------------------------------------------------- the plan


def variant_spec(base: dict[str, Any], values: Mapping[str, Any], registry: Registry, *, source: str) -> ModelSpec:
    """The base spec with ``values`` set, through the normal spec validation.

    Changing a component's ``use`` resets its table (the old component's options may not exist
    on the new one); the other varied keys of that table are set after it.
    """
    document = json.loads(json.dumps(base))  # a deep copy of plain data
    ordered = sorted(values.items(), key=lambda item: not item[0].endswith(".use"))
    for key, value in ordered:
        section, name = key.split(".", 1)
        table = document.setdefault(section, {})
        if not isinstance(table, dict):
            raise SweepError(f"{source}: --vary {key}: [{section}] is not a table of keys; vary a key of "
                             f"[model] or of a component table instead")
        if name == "use":
            table.clear()
        table[name] = value
    try:
        return structure_spec(document, registry, file=source)
    except BlockspecError as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        setting = ", ".join(f"{k}={v!r}" for k, v in values.items())
        raise SweepError(f"--vary {setting}: the spec does not validate: {first}") from None


def check_key(key: str, base: dict[str, Any], *, source: str) -> None:
    """A dotted ``section.key`` naming a table the spec has (or may have: a component kind)."""
    if not re.fullmatch(r"[A-Za-z_][\w-]*\.[A-Za-z_][\w-]*", key):
        raise SweepError(f"--vary: expected a dotted spec key such as positional.use or model.d_model, "
                         f"found {key!r:.60}")
    section = key.split(".", 1)[0]
    if section not in base:
        raise SweepError(f"{source}: --vary {key}: the spec has no [{section}] table; "
                         f"it has {', '.join(f'[{s}]' for s in base)}")


def check_run_count(vary: Mapping[str, Sequence[str]], seeds: Sequence[int]) -> None:
    """Refuse, before any variant is made, more runs than a sweep may hold (each is a training run)."""
    runs = math.prod(len(values) for values in vary.values()) * len(seeds)
    if runs > MAX_RUNS:
        raise SweepError(Problem(path="vary", expected=f"at most {MAX_RUNS:,} runs (variants × seeds)",
                                 found=f"{runs:,}", hint="vary fewer values, or split the sweep"))


def make_variants(base: ModelSpec, vary: Mapping[str, Sequence[str]], registry: Registry, *,
                  source: str) -> list[Variant]:
    """Every combination of ``vary``'s values, each built once (so a spec that validates but cannot
    build, e.g. rope on an odd head size, is refused before any training)."""
    document = spec_to_dict(base)
    for key, texts in vary.items():
        check_key(key, document, source=source)
        if not texts:
            raise SweepError(f"--vary {key}: expected one or more values after '=', found none")
        check_distinct(key, texts)
    keys = list(vary)
    variants: list[Variant] = []
    specs: dict[str, Variant] = {}  # each variant's spec, as canonical JSON
    for combination in itertools.product(*(list(map(parse_value, vary[k])) for k in keys)):
        values = dict(zip(keys, combination))
        spec = variant_spec(document, values, registry, source=source)
        variants.append(_distinct(Variant(values, spec, _parameters(spec, registry)), specs))
    return variants


def check_distinct(key: str, texts: Sequence[str]) -> None:
    """Refuse a value given twice (``learned,learned``, ``16,0x10``): it would train the same runs twice."""
    seen: dict[str, str] = {}
    for text in texts:
        value = parse_value(text)
        identity = json.dumps(value)  # 1, 1.0 and true are three values; 16 and 0x10 one
        if identity in seen:
            given = "" if seen[identity] == text else f" (as {seen[identity]!r} and {text!r})"
            raise SweepError(Problem(path="vary", message=f"{key}: {value!r} is given twice{given}",
                                     hint="give each value once: each is already one run per seed"))
        seen[identity] = text


def _distinct(variant: Variant, specs: dict[str, Variant]) -> Variant:
    """``variant``, unless an earlier one has its very spec (``model.dropout=0,0.0``): that run would train twice.
    ``specs`` holds the earlier variants by their spec's canonical JSON, and gains this one."""
    twin = specs.setdefault(json.dumps(spec_to_dict(variant.spec), sort_keys=True), variant)
    if twin is not variant:
        raise SweepError(Problem(path="vary", message=f"{twin.label} and {variant.label} give the same spec",
                                 hint="vary values that differ: each variant would be the same run"))
    return variant


def _parameters(spec: ModelSpec, registry: Registry) -> int:
    """Counted on the meta device (shapes only: no memory, no time); tied weights once."""
    return count_parameters(spec, registry).exact


# ---------------------------------------------------------------- running


def train_run(variant: Variant, seed: int, directory: Path, data: Dataset, settings: dict[str, Any], *,
              registry: Registry, world: World, checkpoint_every: int, memory_check: bool = True,
              threads: int | None = None) -> RunResult:
    """Train (or continue, or just read) one run; its checkpoint in ``directory`` is the record.

    A finished run asked for more steps continues from its checkpoint: it resumes exactly, so it is the
    run that would have trained to those steps at once (sweep_folder.py refuses it when it would not).

    A run that diverges is recorded beside its checkpoint (which keeps its last good step) and not
    trained again by a rerun: the same seed and settings would diverge at the same step.
    """
    config = run_config({**settings, "seed": seed})
    recorded = read_divergence(directory)
    if recorded is not None:
        return RunResult(variant, seed, directory, loop.History(), 0.0, skipped=True, diverged=recorded)
    step = saved_step(directory)
    if step is not None and step >= config.steps:
        return _finished(variant, seed, directory, data)
    resume = load_checkpoint(directory, registry) if step is not None else None
    run = Run(spec=variant.spec, data=data, config=config, resume=resume, out=directory,
              checkpoint_every=checkpoint_every, replace_out=True, memory_check=memory_check, threads=threads)
    trainer = start(run, registry=registry, world=world)
    try:
        outcome = execute(run, trainer)
    except DivergedError as error:  # a finding of the sweep, not its failure: the other runs go on
        return RunResult(variant, seed, directory, trainer.history, 0.0, skipped=False,
                         diverged=record_divergence(directory, error))
    return RunResult(variant, seed, directory, outcome.history, outcome.run_tokens_per_s, skipped=False,
                     continued_from=step)


def record_divergence(directory: Path, error: DivergedError) -> str:
    """Write the record of a diverged run atomically; return the line that reports it."""
    record = {"step": error.step, "steps": error.steps, "what": error.what}
    with atomic_directory(divergence_record(directory), overwrite=True) as staging:
        (staging / DIVERGED_FILE).write_text(json.dumps(record) + "\n", encoding="utf-8")
    return f"diverged at step {error.step} of {error.steps}: {error.what}"


def read_divergence(directory: Path) -> str | None:
    """The line of a run recorded as diverged; None when it was not (an unreadable record: run it again)."""
    try:
        record = json.loads((divergence_record(directory) / DIVERGED_FILE).read_text(encoding="utf-8"))
        return f"diverged at step {int(record['step'])} of {int(record['steps'])} (recorded): {record['what']}"
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _finished(variant: Variant, seed: int, directory: Path, data: Dataset) -> RunResult:
    training = json.loads(read_extra_file(directory, TRAINING_FILE))
    history = with_bits_per_byte(loop.History.from_dict(training["history"]), data)
    per_step = int(training["config"]["batch_size"]) * variant.spec.model.context_length
    rate = tokens_per_s(int(training["step"]), per_step, float(training.get("train_seconds", 0.0)))
    return RunResult(variant, seed, directory, history, rate, skipped=True)


def with_bits_per_byte(history: loop.History, data: Dataset) -> loop.History:
    """``history`` with the bits per byte of each evaluation recorded before training measured it: the same
    figure from the same validation loss (its sample) and the same data's tokens per byte."""
    evals = [e if e.val_bpb is not None else attrs.evolve(e, val_bpb=loop.validation_bpb(data, e.val_loss))
             for e in history.evals]
    return loop.History(history.train, evals)


def run_sweep(spec: str | Path, data: str | Path, vary: Mapping[str, Sequence[str]], out: str | Path, *,
              seeds: Sequence[int] = (0,), settings: Mapping[str, Any] | None = None, force: bool = False,
              checkpoint_every: int = 0, device: str | torch.device = "cpu", registry: Registry | None = None,
              report: Callable[[int, int, RunResult], None] | None = None, memory_check: bool = True,
              threads: int | None = None) -> SweepResult:
    """Train every combination of ``vary`` (dotted spec key -> value texts) for every seed, under ``out``.

    Everything is checked first (keys, values, each variant built on the meta device and, unless not
    ``memory_check``, its training estimated against the device's memory, the data, the folder and the
    runs it already holds); then the runs go in order, and ``report(i, n, result)`` hears of each. Rerun
    with the same arguments to resume an interrupted sweep; with more seeds, values or steps to grow it.
    """
    from blockspec.registry.loading import load_registry

    registry = registry if registry is not None else load_registry()
    if not seeds or len(set(seeds)) != len(seeds):
        raise SweepError(Problem(path="seeds", expected="distinct seeds", found=str(list(seeds))))
    check_run_count(vary, seeds)
    source = open_source(spec, registry)  # a spec file, a checkpoint or a Hugging Face directory
    variants = make_variants(source.spec, vary, registry, source=str(spec))
    config = run_config({**(settings or {}), "seed": seeds[0]})
    world = World(device=torch.device(device))
    for variant in variants:
        check_head(variant.spec, registry, source=f"{spec} ({variant.label})")
        if memory_check:
            check_memory(variant.spec, config, registry, world=world, doing=f"--vary {variant.label}: training")
    dataset = open_data(data, [v.spec for v in variants], model_tokenizer(source), tokenizer_of=spec)
    folder, base = Path(out), sweep_base(spec_to_dict(source.spec), data, config)
    plan = plan_document(str(spec), base, vary, seeds, config.steps)
    check_writable_target(folder, kind=SWEEP, overwrite=True, inputs=[str(spec), str(data)])  # before the lock
    with folder_lock(folder):  # a second sweep of this folder is refused here, before it changes anything
        jobs, record = plan_jobs(folder, variants, seeds, config.steps, base, plan, force=force,
                                 schedule_stretches=config.floor_lr == config.lr)
        with output_errors(folder):
            (folder / RUNS).mkdir(parents=True, exist_ok=True)
        record.write()  # every run it will train is recorded before it trains; the ones it retrains after
        options = {"registry": registry, "world": world, "checkpoint_every": checkpoint_every,
                   "memory_check": memory_check, "threads": threads}

        def train(variant: Variant, seed: int, directory: Path) -> RunResult:
            return train_run(variant, seed, directory, dataset, attrs.asdict(config), **options)

        runs = [_run_job(number, jobs, record, base, train, report) for number in range(1, len(jobs) + 1)]
        return write_results(folder, variants, runs)


def _run_job(number: int, jobs: Sequence[Job], record: Folder, base: dict[str, Any], train: Callable[..., RunResult],
             report: Callable[[int, int, RunResult], None] | None) -> RunResult:
    """Job ``number`` of ``jobs`` (retrained first if ``--force`` redoes it), reported when it is done."""
    job = jobs[number - 1]
    if job.redo:
        redo(record, job, run_key(base, job.variant.values))
    try:
        result = train(job.variant, job.seed, job.directory)
    except Interrupted as stopped:  # the run saved where it stopped: a rerun continues it, redoing nothing
        raise Interrupted(f"run {number}/{len(jobs)} ({job.variant.label}, seed {job.seed}) {stopped}; "
                          "rerun the same sweep command to resume it", saved=stopped.saved) from None
    if report is not None:
        report(number, len(jobs), result)
    return result


# ---------------------------------------------------------------- results


def summarize(variants: Sequence[Variant], runs: Sequence[RunResult]) -> list[dict[str, Any]]:
    """Per variant: parameters, final train and validation loss as mean and std over seeds, tokens/s.

    The std is the sample standard deviation (n - 1); 0 with one seed. A seed that diverged makes
    its variant's losses nan (it has no final loss), and is counted in ``diverged``.
    """
    rows = []
    for variant in variants:
        mine = [r for r in runs if r.variant is variant]
        train = [math.nan if r.diverged else r.history.evals[-1].train_loss for r in mine]
        val = [math.nan if r.diverged else r.history.evals[-1].val_loss for r in mine]
        bpb = [math.nan if r.diverged or r.history.evals[-1].val_bpb is None else r.history.evals[-1].val_bpb
               for r in mine]
        rows.append({**variant.values, "parameters": variant.parameters, "seeds": len(mine),
                     "diverged": sum(r.diverged is not None for r in mine),
                     "train_loss_mean": statistics.fmean(train), "train_loss_std": _std(train),
                     "val_loss_mean": statistics.fmean(val), "val_loss_std": _std(val),
                     "val_bpb_mean": statistics.fmean(bpb), "val_bpb_std": _std(bpb),
                     "tokens_per_s": statistics.fmean(r.tokens_per_s for r in mine)})
    return rows


def _std(values: Sequence[float]) -> float:
    """Sample std; 0 for one seed; nan when a run diverged (statistics refuses non-finite values)."""
    if len(values) < 2:
        return 0.0
    return statistics.stdev(values) if all(map(math.isfinite, values)) else math.nan


def write_results(folder: Path, variants: Sequence[Variant], runs: Sequence[RunResult]) -> SweepResult:
    rows = summarize(variants, runs)
    files = [_write_csv(folder / "results.csv", rows), _write_markdown(folder / "results.md", rows)]
    note = None
    try:
        files.append(plot_curves(runs, folder / "results.png"))
    except ImportError:
        note = "no results.png: plots need matplotlib (pip install 'blockspec[plot]')"
    return SweepResult(list(runs), rows, files, note)


def _write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    stream = io.StringIO(newline="")
    writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return write_atomically(path, stream.getvalue())


def _write_markdown(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    keys = [k for k in rows[0] if k not in _NUMBERS]
    header = [*keys, "parameters", "seeds", "train loss", "val loss", "val bits/byte", "tokens/s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        seeds = f"{row['seeds']} ({row['diverged']} diverged)" if row["diverged"] else str(row["seeds"])
        cells = [*(str(row[k]) for k in keys), f"{row['parameters']:,}", seeds,
                 f"{row['train_loss_mean']:.4f} ± {row['train_loss_std']:.4f}",
                 f"{row['val_loss_mean']:.4f} ± {row['val_loss_std']:.4f}",
                 f"{row['val_bpb_mean']:.4f} ± {row['val_bpb_std']:.4f}", f"{row['tokens_per_s']:,.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return write_atomically(path, "\n".join(lines) + "\n")


_NUMBERS = ("parameters", "seeds", "diverged", "train_loss_mean", "train_loss_std", "val_loss_mean", "val_loss_std",
            "val_bpb_mean", "val_bpb_std", "tokens_per_s")


def plot_curves(runs: Sequence[RunResult], path: Path) -> Path:
    """Validation bits per byte (or, for runs recorded without it, loss) against step, one colour per variant,
    one line per seed. ImportError without matplotlib."""
    from blockspec.train.plot import pyplot as load_pyplot

    in_bits = all(e.val_bpb is not None for run in runs for e in run.history.evals)

    pyplot = load_pyplot()
    figure, axes = pyplot.subplots(figsize=(8, 5))
    labels: dict[str, str] = {}
    for run in runs:
        color = labels.setdefault(run.variant.label, f"C{len(labels) % 10}")
        first = sum(r.variant.label == run.variant.label for r in runs[:runs.index(run)]) == 0
        values = [e.val_bpb if in_bits else e.val_loss for e in run.history.evals]
        axes.plot([e.step for e in run.history.evals], values, "o-", ms=3,
                  color=color, label=run.variant.label if first else None)
    axes.set(xlabel="step", ylabel="validation bits per byte" if in_bits else "validation cross-entropy (nats / token)",
             title="sweep: validation " + ("bits per byte" if in_bits else "loss"))
    axes.grid(alpha=0.3)
    axes.legend()
    try:
        return save_figure(figure, path)
    finally:
        pyplot.close(figure)
