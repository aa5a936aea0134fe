"""One training run: what `blockspec train` and each run of a sweep do, decided once and executed once.

A ``Run`` is fixed before step 1: its spec (the LM head checked before any data is read), its
dataset (chosen by one rule and checked against the model's tokenizer), its settings, where it
starts (fresh weights, a model's weights to fine-tune, or a checkpoint to resume), and where it
is kept (the checkpoint, its cadence, the carried Hugging Face files). ``start`` makes its
trainer; ``execute`` trains, evaluates the final step and saves. Nothing here prints: the
caller hears of each step and evaluation through a ``Listener``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs
import torch
from attrs import field, frozen

from blockspec.assembly.assemble import adapt, build, build_unfilled
from blockspec.checkpoint.base_ref import BaseReference, base_reference, check_same_base
from blockspec.assembly.memory import check_fits, training_estimate
from blockspec.errors import CheckpointError, Problem
from blockspec.checkpoint.layout import carried_entries
from blockspec.outputs.lock import folder_lock
from blockspec.registry.components import Registry
from blockspec.spec.convert import spec_to_dict
from blockspec.spec.schema import ModelSpec
from blockspec.data.dataset import CharDataset, Dataset
from blockspec.data.prepared import PreparedDataset
from blockspec.data.tokenizer import Tokenizer
from blockspec.registry.specs import load_adapters
from blockspec.sources import Source, open_source
from blockspec.sources.kind import CHECKPOINT_KINDS
from blockspec.train.checkpointing import Checkpoint, load_checkpoint, save_checkpoint, saved_step
from blockspec.train.distributed import Strategy, World
from blockspec.train.finite import DivergedError
from blockspec.train.interrupt import Interrupted, deferred_interrupt
from blockspec.train.loop import (Evaluation, History, Trainer, TrainConfig, TrainConfigError, check_lm_head,
                                  make_config)
from blockspec.train.optim import half_dtype
from blockspec.train.threads import training_threads
from blockspec.train.throughput import flops_per_token, measured_peak, utilisation


@frozen(kw_only=True, eq=False)
class Run:
    """One training run, fully decided: nothing about it is chosen after step 1."""

    spec: ModelSpec
    data: Dataset
    config: TrainConfig
    weights: Source | None = None  # fine-tune: start from this source's weights; None: build with config.seed
    resume: Checkpoint | None = None  # continue this checkpoint's run: its weights, optimizer, step, history
    carried: dict[str, bytes] = field(factory=dict)  # "hf/..." files every checkpoint of the run keeps
    base: BaseReference | None = None  # adapter fine-tuning: the base checkpoint the adapters train over
    out: str | Path | None = None  # the checkpoint, written atomically at the end (and every checkpoint_every steps)
    checkpoint_every: int = 0
    replace_out: bool = False  # an existing checkpoint at ``out`` may be replaced (later saves always replace)
    strategy: Strategy = "ddp"
    measure_peak: bool = False  # time the device's matmul rate first (CUDA only), to report MFU
    memory_check: bool = True  # refuse, before building, a run the device cannot hold (check_memory)
    threads: int | None = None  # CPU threads asked for; None: the thread rule's (train/threads.py)


@frozen(kw_only=True, eq=False)
class Outcome:
    """Where a run stands after ``execute``: its record, and what this execution of it cost."""

    step: int
    history: History
    tokens_per_s: float  # over this execution's steps
    run_tokens_per_s: float  # over every step of the run, resumed ones included
    seconds: float  # wall clock of this execution, the final evaluation and save included
    mfu: float | None  # None without a measured peak
    peak_flops: float | None
    checkpoint: str | Path | None


class Listener(Protocol):
    """What a caller hears while a run trains (a progress bar, a log); every rank hears it."""

    def step(self, trainer: Trainer, loss: float, meter: Meter) -> None: ...

    def evaluation(self, trainer: Trainer, evaluation: Evaluation, meter: Meter) -> None: ...


# ---------------------------------------------------------------- deciding a run


def plan(source: str, data: str, settings: Mapping[str, Any], *, registry: Registry, resume: str | None = None,
         adapters: str | Path | None = None, out: str | Path | None = None, checkpoint_every: int = 0,
         replace_out: bool = False, strategy: Strategy = "ddp", measure_peak: bool = False,
         memory_check: bool = True, threads: int | None = None) -> Run:
    """The run `blockspec train SOURCE --data DATA` describes: a spec file trains fresh weights; a checkpoint or
    Hugging Face directory fine-tunes its own (with its tokenizer and carried files); ``resume`` continues a run.
    ``adapters`` (a file of [[adapters]] tables), or an adapter checkpoint as the source, trains adapters over a
    frozen base checkpoint, and saves only them (``adapter_base``).

    ``settings`` are the ones set explicitly (over the resumed run's, over the defaults); the rest are ``Run``'s.
    """
    opened = open_source(source, registry)  # a spec file, a checkpoint or a Hugging Face directory
    spec = load_adapters(adapters, opened.spec, registry) if adapters else opened.spec
    check_head(spec, registry, source=source)
    base = adapter_base(opened, spec, registry, adapters=adapters)
    checkpoint = load_checkpoint(resume, registry) if resume else None
    if checkpoint is not None:
        check_resumable(checkpoint, spec, base, resume=str(resume), source=source)
    config = run_config(settings, checkpoint)
    if checkpoint is not None:
        check_reachable(config.steps, checkpoint.step, source=str(resume))
    weights = opened if opened.has_weights and checkpoint is None else None
    dataset = open_data(data, [spec], model_tokenizer(opened, checkpoint), tokenizer_of=resume or source)
    carried = checkpoint.carried if checkpoint else carried_entries(weights.carried()) if weights else {}
    return Run(spec=spec, data=dataset, config=config, weights=weights, resume=checkpoint, carried=carried, base=base,
               out=out, checkpoint_every=checkpoint_every, replace_out=replace_out, strategy=strategy,
               measure_peak=measure_peak, memory_check=memory_check, threads=threads)


def adapter_base(opened: Source, spec: ModelSpec, registry: Registry, *,
                 adapters: str | Path | None) -> BaseReference | None:
    """The base checkpoint an adapter run trains over (None without [[adapters]]), its targets checked first:
    an adapter checkpoint's own base, or the checkpoint given (a spec file or a Hugging Face directory is none)."""
    if not spec.adapters:
        return None
    check_adapters(spec, registry, file=adapters)
    if opened.kind in CHECKPOINT_KINDS:
        recorded = opened.base()  # an adapter checkpoint's own base
        if recorded is None and adapters is None:
            return None  # a checkpoint saved whole with its adapters: it trains them frozen-based, and stays whole
        return recorded or base_reference(opened.path)
    what = "a spec file's random weights" if opened.kind == "spec" else "a Hugging Face directory"
    hint = "train the spec without [[adapters]] first, then adapters over its checkpoint" if opened.kind == "spec" \
        else f"import it first (`blockspec import-hf {opened.path} --out CKPT`), then train adapters over CKPT"
    raise CheckpointError(Problem(file=str(opened.path), message=f"adapters train over a base checkpoint, not over "
                                  f"{what}", hint=hint))


def check_adapters(spec: ModelSpec, registry: Registry, *, file: str | Path | None) -> None:
    """Every [[adapters]] entry's targets and rank, on the meta device (nothing allocated): a pattern that
    matches nothing is refused before any weights or data are read, in the file that wrote it."""
    where = spec if file is None else attrs.evolve(spec, source=str(file))
    build_unfilled(where, registry=registry, device="meta")


def check_resumable(checkpoint: Checkpoint, spec: ModelSpec, base: BaseReference | None, *, resume: str,
                    source: str) -> None:
    """A run resumes from a checkpoint of the same spec, and an adapter run over the same base."""
    if spec_to_dict(checkpoint.spec) != spec_to_dict(spec):
        hint = " (with its --adapters file)" if checkpoint.spec.adapters and not spec.adapters else ""
        raise CheckpointError(f"{resume}: was trained from a different spec than {source}; "
                              f"pass the spec it was trained from{hint}")
    if checkpoint.base is not None and base is not None:
        check_same_base(checkpoint.base, base, adapters=resume)


def check_reachable(steps: int, step: int, *, source: str) -> None:
    """Refuse a resume asked for fewer steps than its checkpoint has: ``steps`` is the total to reach, and
    nothing can train a run back to an earlier step (it would save step ``step`` saying ``steps``)."""
    if steps < step:
        raise TrainConfigError(Problem(
            file=source, path="$.steps", expected=f"a total of at least {step} steps (the checkpoint is at step "
            f"{step})", found=str(steps), names={"steps": "steps"},
            hint=f"{{steps}} is the total to reach, not a number of steps more: pass {{steps}} {step} to evaluate "
                 f"the checkpoint as it is, or more to train on"))


def check_head(spec: ModelSpec, registry: Registry, *, source: str) -> None:
    """Refuse, before any data is read, a spec whose head does not predict the next token."""
    check_lm_head(registry.get("head", spec.head.name, spec.head.distribution), source=source)


def model_tokenizer(source: Source, resume: Checkpoint | None = None) -> Tokenizer | None:
    """The model's tokenizer: the resumed run's, else its source's (``sources``' one rule); None for a spec
    file (the data then brings its own: a text's characters, or a prepared directory's tokenizer)."""
    return resume.tokenizer if resume is not None else source.tokenizer()


def open_data(path: str | Path, specs: Sequence[ModelSpec], tokenizer: Tokenizer | None, *,
              tokenizer_of: str | Path) -> Dataset:
    """The dataset every spec trains on, checked to fit each: a prepared directory, whose tokenizer must be the
    model's (``tokenizer_of``'s) if the model has one, else a text file encoded with the model's tokenizer (its
    characters or subwords: each id keeps its meaning), or with the text's own characters."""
    if Path(path).is_dir():
        dataset = PreparedDataset(path)
        if tokenizer is not None:
            dataset.check_tokenizer(tokenizer, source=str(tokenizer_of))
    else:
        dataset = CharDataset.from_file(path, tokenizer)
    for spec in specs:
        dataset.check_fits(spec.model.vocab_size, spec.model.context_length)
    return dataset


def check_memory(spec: ModelSpec, config: TrainConfig, registry: Registry, *, world: World = World(),
                 strategy: Strategy = "ddp", doing: str = "training") -> None:
    """Refuse a run whose weights, optimizer state and one micro-batch's activations ``world``'s device cannot
    hold (``blockspec.assembly.memory``'s estimate, on the meta device); FSDP shards all but the activations."""
    micro_batch = max(config.batch_size // world.size // config.grad_accum, 1)
    shards = world.size if strategy == "fsdp" else 1
    estimate = training_estimate(spec, registry, micro_batch=micro_batch, shards=shards)
    check_fits(estimate, world.device, doing=f"{doing} with batches of {config.batch_size}", source=spec.source)


def run_config(settings: Mapping[str, Any], resume: Checkpoint | None = None) -> TrainConfig:
    """Defaults, then the resumed run's settings, then ``settings`` (the ones set explicitly)."""
    base = resume.training["config"] if resume is not None else {}
    return make_config({**base, **settings})


# ---------------------------------------------------------------- executing it


def start(run: Run, *, registry: Registry, world: World = World()) -> Trainer:
    """The run's trainer: the model built from its seed, or the weights it fine-tunes, or the resumed ones."""
    if run.memory_check:
        check_memory(run.spec, run.config, registry, world=world, strategy=run.strategy)
    model = run.weights.model() if run.weights else build(run.spec, registry=registry, seed=run.config.seed)
    if run.spec.adapters and not model.adapted:  # a base checkpoint: its adapters go on now, from the run's seed
        adapt(model, run.spec, registry, seed=run.config.seed)
    return Trainer(model, run.data, run.config, world=world, strategy=run.strategy, resume=run.resume)


def execute(run: Run, trainer: Trainer, listener: Listener | None = None) -> Outcome:
    """Train up to the run's last step, saving every ``checkpoint_every`` steps; then make sure the last
    step is evaluated (a run resumed at its end still says where the model stands) and save it.

    The run trains under the thread rule (``train/threads.py``), whoever runs it.
    A run that diverges raises DivergedError and saves nothing after its last good step. Ctrl-C ends the
    step under way, saves it (a checkpoint ``--resume`` continues bit for bit) and raises Interrupted.
    The run holds its checkpoint's folder lock throughout: a second writer of ``out`` is refused before
    it trains, not at its save.
    """
    writes = run.out is not None and trainer.world.is_main
    with training_threads(run.threads, trainer.raw, trainer.world.device):
        with folder_lock(run.out) if writes else contextlib.nullcontext():
            return _execute(run, trainer, listener)


def _execute(run: Run, trainer: Trainer, listener: Listener | None) -> Outcome:
    meter = Meter.begin(trainer, measure_peak=run.measure_peak)
    keeper = _Keeper(run, trainer)

    def on_step(trainer: Trainer, loss: float) -> None:
        if listener is not None:
            listener.step(trainer, loss, meter)
        keeper.on_step()

    def on_eval(trainer: Trainer, evaluation: Evaluation) -> None:
        if listener is not None:
            listener.evaluation(trainer, evaluation, meter)

    with deferred_interrupt() as trainer.stop:
        try:
            trainer.run(on_step=on_step, on_eval=on_eval)
            _finish(trainer, keeper)
        except DivergedError as error:
            raise keeper.kept(error) from None
    return meter.outcome(checkpoint=run.out)


def _finish(trainer: Trainer, keeper: _Keeper) -> None:
    """Evaluate the last step unless stopped early (a resumed run must not see an extra evaluation), save;
    on a stop request, raise Interrupted after the save."""
    if trainer.stopping:
        keeper.save_and_stop()
    if not trainer.history.evals or trainer.history.evals[-1].step != trainer.step:
        trainer.evaluate()
    keeper.save()
    if trainer.stop.requested:  # Ctrl-C during the last evaluation or save: the run is complete and kept
        keeper.save_and_stop()


class _Keeper:
    """The run's checkpoint: at its cadence and at the end, with the carried files, by the main rank."""

    def __init__(self, run: Run, trainer: Trainer) -> None:
        self.run, self.trainer, self.replace = run, trainer, run.replace_out
        self.saved_step: int | None = None  # the step this execution last saved

    def on_step(self) -> None:
        every, step = self.run.checkpoint_every, self.trainer.step
        if every and step % every == 0 and step < self.trainer.config.steps:
            self.save()

    def save(self) -> None:
        world = self.trainer.world
        if self.run.out is None or not (self.trainer.sharded or world.is_main) or self.saved_step == self.trainer.step:
            return
        self.trainer.check_weights()  # never a non-finite checkpoint over a good one
        checkpoint = attrs.evolve(self.trainer.checkpoint(), carried=self.run.carried,  # a collective under FSDP
                                  base=self.run.base)
        if world.is_main:
            save_checkpoint(self.run.out, checkpoint, overwrite=self.replace)
            self.replace = True  # later saves of this run replace its own checkpoint
        self.saved_step = self.trainer.step

    def save_and_stop(self) -> None:
        """Save this step's checkpoint and raise Interrupted saying so; a second Ctrl-C aborts the save whole."""
        step, steps, out = self.trainer.step, self.trainer.config.steps, self.run.out
        try:
            self.save()
        except KeyboardInterrupt:  # the atomic write either had installed the new checkpoint or left the old
            if out is not None and saved_step(out) == step:
                raise Interrupted(f"interrupted again after saving step {step} to {out}", saved=out) from None
            raise Interrupted(f"interrupted again while saving step {step}: {self._kept()}") from None
        if out is None:
            raise Interrupted(f"stopped at step {step} of {steps}; nothing was saved (the run has no checkpoint)")
        raise Interrupted(f"stopped at step {step} of {steps} and saved {out}", saved=out)

    def kept(self, error: DivergedError) -> DivergedError:
        """``error``, saying which checkpoint still holds the run's last good state."""
        return error.with_hint(self._kept())

    def _kept(self) -> str:
        """What holds the run's last good state: the step this execution saved, or what ``out`` held before."""
        out = self.run.out
        if self.saved_step is not None:
            return f"{out} keeps step {self.saved_step}, the last good one"
        return f"nothing was saved over {out}" if out is not None and Path(out).exists() else "nothing was saved"


# ---------------------------------------------------------------- how fast


def tokens_per_s(steps: int, tokens_per_step: int, seconds: float) -> float:
    """Training tokens per second of ``steps`` steps that took ``seconds``; 0 when none were timed."""
    return steps * tokens_per_step / seconds if seconds > 0 else 0.0


@attrs.define
class Meter:
    """Tokens/s and MFU of the steps this execution takes (a resumed run's earlier steps are not counted)."""

    trainer: Trainer
    per_token: float  # training FLOPs per token
    peak: float | None  # the matmul rate of all processes' devices, measured now on CUDA; None elsewhere
    first_step: int
    seconds_before: float
    started: float = attrs.field(factory=time.perf_counter)

    @classmethod
    def begin(cls, trainer: Trainer, *, measure_peak: bool) -> Meter:
        model = trainer.spec.model
        per_token = flops_per_token(trainer.raw, n_layers=model.n_layers, d_model=model.d_model,
                                    context_length=model.context_length)
        peak = _peak(trainer) if measure_peak else None
        return cls(trainer, per_token, peak, trainer.step, trainer.train_seconds)

    def tokens_per_s(self) -> float:
        steps, seconds = self.trainer.step - self.first_step, self.trainer.train_seconds - self.seconds_before
        return tokens_per_s(steps, self.trainer.tokens_per_step, seconds)

    def mfu(self) -> float | None:
        return utilisation(self.tokens_per_s(), self.per_token, self.peak)

    def seconds(self) -> float:
        return time.perf_counter() - self.started

    def outcome(self, *, checkpoint: str | Path | None) -> Outcome:
        trainer = self.trainer
        whole = tokens_per_s(trainer.step, trainer.tokens_per_step, trainer.train_seconds)
        return Outcome(step=trainer.step, history=trainer.history, tokens_per_s=self.tokens_per_s(),
                       run_tokens_per_s=whole, seconds=self.seconds(), mfu=self.mfu(), peak_flops=self.peak,
                       checkpoint=checkpoint)


def _peak(trainer: Trainer) -> float | None:
    """Each rank times its own GPU; the rate of the run is that times the world size."""
    device = trainer.world.device
    dtype = half_dtype(device) if trainer.config.precision == "bf16-mixed" else torch.float32
    peak = measured_peak(device, dtype)
    return peak * trainer.world.size if peak else None
