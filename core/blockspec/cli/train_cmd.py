"""`blockspec train`: train a spec on a text file (characters) or a prepared dataset (any tokenizer); torchrun-aware."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from blockspec.spec.convert import spec_to_dict
from blockspec.errors import CheckpointError
from blockspec.checkpoint.outputs import check_writable_target, same_path
from blockspec.cli.common import (add_device_argument, add_json_argument, add_plot_argument, seed_int,
                                  check_plot_file, emit_json, flag_names, non_negative_float, non_negative_int,
                                  memory_limit, positive_float, positive_int, registry_with_warnings,
                                  resolve_device, thread_count)

PRECISIONS = ("fp32", "bf16-mixed")  # as blockspec.train.loop.PRECISIONS, without importing torch here
SMALL_MODEL = 5_000_000  # parameters: below this, one intra-op thread is fastest on CPU
SETTINGS = ("steps", "batch_size", "lr", "weight_decay", "seed", "eval_every", "eval_batches", "warmup", "min_lr",
            "grad_accum", "precision", "compile")
# the library names settings and parameters; this command's user knows them as flags
FLAGS = {**{f"$.{name}": f"--{name.replace('_', '-')}" for name in SETTINGS},
         "batch_size": "--batch-size", "grad_accum": "--grad-accum", "overwrite": "--force", "fsdp": "--fsdp",
         "ddp": "DDP (no --fsdp)"}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("train", help="train a spec on a text file (characters) or a prepared dataset")
    parser.add_argument("spec", metavar="SPEC", help="TOML spec file; a checkpoint or Hugging Face directory "
                        "to fine-tune from its weights (and its tokenizer, if it has one)")
    parser.add_argument("--data", required=True, metavar="FILE|DIR",
                        help="UTF-8 text (characters; first 90%% train, last 10%% validation), or a directory "
                             "written by blockspec data prepare (its tokens and tokenizer)")
    parser.add_argument("--steps", type=non_negative_int, metavar="N",
                        help="train up to step N in total (default 600)")
    parser.add_argument("--batch-size", type=positive_int, metavar="B",
                        help="windows per step over all processes (default 32)")
    parser.add_argument("--lr", type=positive_float, metavar="LR", help="AdamW learning rate (default 3e-3)")
    parser.add_argument("--weight-decay", type=non_negative_float, metavar="WD",
                        help="AdamW weight decay of the weight matrices; never norms, biases or embeddings (default 0)")
    parser.add_argument("--warmup", type=non_negative_int, metavar="STEPS",
                        help="linear learning-rate warm-up over the first STEPS steps (default 0)")
    parser.add_argument("--min-lr", type=non_negative_float, metavar="LR", help="after warm-up, cosine decay of "
                        "the learning rate down to LR at the last step (default: --lr, a constant rate)")
    parser.add_argument("--grad-accum", type=positive_int, metavar="K", help="split each step's batch into K "
                        "micro-batches and accumulate their gradients: less memory, same step (default 1)")
    parser.add_argument("--precision", choices=PRECISIONS, help="bf16-mixed: autocast to bfloat16 (float16 with "
                        "loss scaling on a GPU without bfloat16); weights stay float32 (default fp32)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile the model (the first steps pay for compiling; default: no)")
    parser.add_argument("--seed", type=seed_int, metavar="S", help="seed for weights and batches (default 0)")
    parser.add_argument("--eval-every", type=non_negative_int, metavar="K",
                        help="validate every K steps; 0: at the end (default 100)")
    parser.add_argument("--eval-batches", type=positive_int, metavar="N", help="batches per validation (default 20)")
    parser.add_argument("--out", metavar="CKPT", help="checkpoint directory, written atomically at the end "
                        "(default with --resume: the resumed checkpoint)")
    parser.add_argument("--checkpoint-every", type=non_negative_int, default=0, metavar="K",
                        help="also checkpoint every K steps (default 0: only at the end)")
    parser.add_argument("--resume", metavar="CKPT", help="continue from a checkpoint: its step, optimizer, settings")
    add_plot_argument(parser, "write the training and validation loss curves to FILE")
    add_device_argument(parser)
    parser.add_argument("--force", action="store_true", help="replace --out and --plot if they exist")
    parser.add_argument("--fsdp", action="store_true", help="under torchrun: FSDP2 sharding instead of DDP")
    parser.add_argument("--threads", type=thread_count, metavar="N", help="CPU threads per process (default: 1 for "
                        "models under 5M parameters, else torch's default)")
    add_json_argument(parser, "a JSON summary at the end, and no progress bar or evaluation lines")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no evaluation lines")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from blockspec.train.distributed import close_world, init_world

    device = resolve_device(args.device)  # a bad --device or --plot fails before any process group or data
    with flag_names(FLAGS):
        _preflight(args)
    world = init_world(device.type if device.index is None else str(device))  # cuda: this rank's GPU
    finished = False
    try:
        with flag_names(FLAGS), memory_limit("--batch-size (or a smaller model)"):
            code = _train(args, world)
        finished = True
        return code
    finally:
        close_world(world, finished=finished)


def _preflight(args: argparse.Namespace) -> None:
    """Refuse every output that could not be written before step 1, not after the last.

    Without --out, --resume writes back to the checkpoint it resumed: the run continues where
    it was kept, and the old checkpoint is replaced atomically only by a later one of the same run.
    """
    resuming_in_place = bool(args.resume) and (args.out is None or same_path(args.out, args.resume))
    if args.resume and args.out is None:
        args.out = args.resume
    if args.out:
        spec_is_resumed = resuming_in_place and same_path(args.spec, args.resume)  # train CKPT --resume CKPT
        inputs = [None if spec_is_resumed else args.spec, args.data, None if resuming_in_place else args.resume]
        check_writable_target(args.out, kind="checkpoint", overwrite=args.force or resuming_in_place, inputs=inputs)
    if args.plot:
        check_plot_file(args.plot)
        check_writable_target(args.plot, kind="file", overwrite=args.force,
                              inputs=[args.spec, args.data, args.resume, args.out])
    args.replace_out = args.force or resuming_in_place


def _train(args: argparse.Namespace, world) -> int:
    from blockspec.assembly.assemble import build
    from blockspec.checkpoint.layout import carried_entries
    from blockspec.sources import open_source
    from blockspec.train.checkpointing import load_checkpoint
    from blockspec.train.loop import Trainer, check_lm_head

    registry = registry_with_warnings() if world.is_main else _quiet_registry()
    source = open_source(args.spec, registry)  # a spec file, a checkpoint or a Hugging Face directory
    spec = source.spec
    check_lm_head(registry.get("head", spec.head.name, spec.head.distribution), source=args.spec)
    resume = load_checkpoint(args.resume, registry) if args.resume else None
    if resume is not None and spec_to_dict(resume.spec) != spec_to_dict(spec):
        raise CheckpointError(f"{args.resume}: was trained from a different spec than {args.spec}; "
                              "pass the spec it was trained from")
    weights = source.has_weights and resume is None  # fine-tune: start from the checkpoint's (or HF model's) weights
    tokenizer = resume.tokenizer if resume else source.tokenizer() if weights else None
    args.carried = resume.carried if resume else carried_entries(source.carried()) if weights else {}
    data = _dataset(args, tokenizer)
    data.check_fits(spec.model.vocab_size, spec.model.context_length)
    config = _config(args, resume)
    model = source.model() if weights else build(spec, registry=registry, seed=config.seed)
    _set_threads(args.threads, model, world)
    trainer = Trainer(model, data, config, world=world, strategy="fsdp" if args.fsdp else "ddp", resume=resume)
    return _Session(args, trainer).run()


def _dataset(args: argparse.Namespace, tokenizer):
    """A prepared directory (its tokenizer must be the model's, if the model has one), else a text file
    (encoded with the model's tokenizer, if it has one: characters or subwords, each id keeps its meaning)."""
    from blockspec.data.dataset import CharDataset
    from blockspec.data.prepared import PreparedDataset

    if not Path(args.data).is_dir():
        return CharDataset.from_file(args.data, tokenizer)
    data = PreparedDataset(args.data)
    if tokenizer is not None:
        data.check_tokenizer(tokenizer, source=args.resume or args.spec)
    return data


def _quiet_registry():
    from blockspec.registry.loading import load_registry

    return load_registry()


def _config(args: argparse.Namespace, resume):
    """Defaults, then the resumed run's settings, then what this command line sets explicitly."""
    from blockspec.train.loop import make_config

    base = resume.training["config"] if resume is not None else {}
    flags = {name: getattr(args, name) for name in SETTINGS}
    return make_config({**base, **{k: v for k, v in flags.items() if v is not None}})


def _set_threads(threads: int | None, model, world) -> None:
    """Tiny models spend their time in thread hand-offs: one thread each is fastest, and shares the CPU well."""
    import torch

    if world.device.type != "cpu" or (threads is None and "OMP_NUM_THREADS" in os.environ):
        return
    if threads is None:
        parameters = sum(p.numel() for p in model.parameters())
        threads = 1 if parameters < SMALL_MODEL else torch.get_num_threads()
    torch.set_num_threads(max(threads, 1))


def _flops(trainer) -> tuple[float, float | None]:
    """Training FLOPs per token, and the matmul rate of all processes' devices, measured now on CUDA
    (each rank times its own GPU; the rate is that times the world size); None elsewhere."""
    import torch

    from blockspec.train.optim import half_dtype
    from blockspec.train.throughput import flops_per_token, measured_peak

    model, device = trainer.spec.model, trainer.world.device
    per_token = flops_per_token(trainer.raw, n_layers=model.n_layers, d_model=model.d_model,
                                context_length=model.context_length)
    dtype = half_dtype(device) if trainer.config.precision == "bf16-mixed" else torch.float32
    peak = measured_peak(device, dtype)
    return per_token, peak * trainer.world.size if peak else None


class _Session:
    """What one `blockspec train` invocation shows and writes around the trainer's loop."""

    def __init__(self, args: argparse.Namespace, trainer) -> None:
        from blockspec.train.progress import Progress

        self.args, self.trainer, self.world = args, trainer, trainer.world
        self.talk = self.world.is_main and not (args.json or args.quiet)
        self.progress = Progress(total=trainer.config.steps, initial=trainer.step, enabled=self.talk)
        self.seconds_before = trainer.train_seconds
        self.per_token, self.peak = _flops(trainer)
        self.started, self.first_step = time.perf_counter(), trainer.step

    def run(self) -> int:
        try:
            self.trainer.run(on_step=self.on_step, on_eval=self.on_eval)
        finally:
            self.progress.close()
        if not self.trainer.history.evals or self.trainer.history.evals[-1].step != self.trainer.step:
            self.trainer.evaluate()  # resumed at or past --steps: still report where the model stands
        if self.args.out:
            self.save()
        if self.args.plot and self.world.is_main:
            self.plot()
        if self.world.is_main:
            self.summarize()
        return 0

    def tokens_per_s(self) -> float:
        seconds = self.trainer.train_seconds - self.seconds_before
        steps = self.trainer.step - self.first_step
        return steps * self.trainer.tokens_per_step / seconds if seconds > 0 else 0.0

    def mfu(self) -> float | None:
        from blockspec.train.throughput import utilisation

        return utilisation(self.tokens_per_s(), self.per_token, self.peak)

    def on_step(self, trainer, loss: float) -> None:
        self.progress.update(loss=loss, tokens_per_s=self.tokens_per_s(), mfu=self.mfu())
        every = self.args.checkpoint_every
        if self.args.out and every and trainer.step % every == 0 and trainer.step < trainer.config.steps:
            self.save()

    def on_eval(self, trainer, evaluation) -> None:
        if self.talk:
            self.progress.write(f"step {evaluation.step:>5}/{trainer.config.steps}  train {evaluation.train_loss:.4f}"
                                f"  val {evaluation.val_loss:.4f}  {self.tokens_per_s():,.0f} tok/s"
                                f"  {time.perf_counter() - self.started:.1f}s")

    def save(self) -> None:
        """The checkpoint, with the Hugging Face files (config, tokenizer) of the model it was fine-tuned from."""
        import attrs

        from blockspec.train.checkpointing import save_checkpoint

        if self.trainer.sharded or self.world.is_main:
            checkpoint = attrs.evolve(self.trainer.checkpoint(), carried=self.args.carried)  # a collective under FSDP
            if self.world.is_main:
                save_checkpoint(self.args.out, checkpoint, overwrite=self.args.replace_out)
                self.args.replace_out = True  # later saves of this run replace its own checkpoint

    def plot(self) -> None:
        from blockspec.train.plot import plot_losses

        name = self.trainer.spec.model.name
        Path(self.args.plot).parent.mkdir(parents=True, exist_ok=True)
        plot_losses({name: self.trainer.history}, self.args.plot, title=f"{name} on {Path(self.args.data).name}")

    def summarize(self) -> None:
        last = self.trainer.history.evals[-1]
        summary = {"steps": self.trainer.step, "train_loss": last.train_loss, "val_loss": last.val_loss,
                   "tokens_per_s": round(self.tokens_per_s(), 1),
                   "seconds": round(time.perf_counter() - self.started, 3), "world_size": self.world.size,
                   "checkpoint": self.args.out, "plot": self.args.plot}
        if self.peak:  # only against a rate measured on this device (CUDA); none on a CPU
            summary["mfu"] = round(self.mfu(), 4)
            summary["peak_flops"] = self.peak
        if self.args.json:
            emit_json(summary)
        else:
            print(f"done: {summary['steps']} steps, train {last.train_loss:.4f}, val {last.val_loss:.4f}, "
                  f"{summary['tokens_per_s']:,.0f} tok/s, {summary['seconds']:.1f}s"
                  + (f"; checkpoint {self.args.out}" if self.args.out else ""), file=sys.stdout, flush=True)
