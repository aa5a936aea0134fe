"""`blockspec train`: train a spec on a text file (characters) or a prepared dataset (any tokenizer); torchrun-aware."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from blockspec.checkpoint.layout import CHECKPOINT
from blockspec.outputs.targets import check_writable_target, same_path
from blockspec.train.plot import PLOT_IMAGE
from blockspec.cli.common import (MEMORY_FLAGS, add_device_argument, add_json_argument, add_memory_check_argument,
                                  add_plot_argument, batch_count, seed_int,
                                  check_plot_file, emit_json, flag_names, non_negative_float, non_negative_int,
                                  memory_limit, positive_float, positive_int, registry_with_warnings,
                                  resolve_device, thread_count)

PRECISIONS = ("fp32", "bf16-mixed")  # as blockspec.train.loop.PRECISIONS, without importing torch here
SMALL_MODEL = 5_000_000  # parameters: below this, one intra-op thread is fastest on CPU
SETTINGS = ("steps", "batch_size", "lr", "weight_decay", "seed", "eval_every", "eval_batches", "warmup", "min_lr",
            "grad_accum", "precision", "compile")
# the library names settings and parameters; this command's user knows them as flags
FLAGS = {**{f"$.{name}": f"--{name.replace('_', '-')}" for name in SETTINGS},
         "batch_size": "--batch-size", "grad_accum": "--grad-accum", "lr": "--lr", "overwrite": "--force", "fsdp": "--fsdp",
         "ddp": "DDP (no --fsdp)", **MEMORY_FLAGS}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("train", help="train a spec on a text file (characters) or a prepared dataset")
    parser.add_argument("spec", metavar="SPEC", help="TOML spec file; a checkpoint or Hugging Face directory "
                        "to fine-tune from its weights (and its tokenizer, if it has one)")
    parser.add_argument("--data", required=True, metavar="FILE|DIR",
                        help="UTF-8 text (characters; first 90%% train, last 10%% validation), or a directory "
                             "written by blockspec data prepare (its tokens and tokenizer)")
    parser.add_argument("--steps", type=non_negative_int, metavar="N",
                        help="train up to step N in total (default 600)")
    parser.add_argument("--batch-size", type=batch_count, metavar="B",
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
    add_memory_check_argument(parser)
    parser.add_argument("--force", action="store_true", help="replace --out if it is a checkpoint and --plot if it is a plot image")
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
        check_writable_target(args.out, kind=CHECKPOINT, overwrite=args.force or resuming_in_place, inputs=inputs)
    if args.plot:
        check_plot_file(args.plot)
        check_writable_target(args.plot, kind=PLOT_IMAGE, overwrite=args.force,
                              inputs=[args.spec, args.data, args.resume, args.out])
    args.replace_out = args.force or resuming_in_place


def _train(args: argparse.Namespace, world) -> int:
    from blockspec.train import run as training
    from blockspec.train.interrupt import Interrupted

    registry = registry_with_warnings() if world.is_main else _quiet_registry()
    settings = {name: getattr(args, name) for name in SETTINGS if getattr(args, name) is not None}
    run = training.plan(args.spec, args.data, settings, registry=registry, resume=args.resume, out=args.out,
                        checkpoint_every=args.checkpoint_every, replace_out=args.replace_out,
                        strategy="fsdp" if args.fsdp else "ddp", measure_peak=True,
                        memory_check=not args.no_memory_check)
    trainer = training.start(run, registry=registry, world=world)
    _set_threads(args.threads, trainer.raw, world)
    bar = _Bar(trainer, talk=world.is_main and not (args.json or args.quiet))
    with bar.progress:
        try:
            outcome = training.execute(run, trainer, bar)
        except Interrupted as stopped:
            if stopped.saved is None:
                raise
            raise Interrupted(f"{stopped}; `--resume {stopped.saved}` continues the run", saved=stopped.saved) from None
    if args.plot and world.is_main:
        _plot(args, trainer.spec.model.name, outcome.history)
    if world.is_main:
        _summarize(args, outcome, world.size)
    return 0


def _quiet_registry():
    from blockspec.registry.loading import load_registry

    return load_registry()


def _set_threads(threads: int | None, model, world) -> None:
    """Tiny models spend their time in thread hand-offs: one thread each is fastest, and shares the CPU well."""
    import torch

    if world.device.type != "cpu" or (threads is None and "OMP_NUM_THREADS" in os.environ):
        return
    if threads is None:
        parameters = sum(p.numel() for p in model.parameters())
        threads = 1 if parameters < SMALL_MODEL else torch.get_num_threads()
    torch.set_num_threads(max(threads, 1))


class _Bar:
    """The run's listener: a progress bar (steps, loss, tokens/s) and, unless silenced, its evaluation lines."""

    def __init__(self, trainer, *, talk: bool) -> None:
        from blockspec.train.progress import Progress

        self.progress = Progress(total=trainer.config.steps, initial=trainer.step, enabled=talk)
        self.talk = talk

    def step(self, trainer, loss: float, meter) -> None:
        self.progress.update(loss=loss, tokens_per_s=meter.tokens_per_s(), mfu=meter.mfu())

    def evaluation(self, trainer, evaluation, meter) -> None:
        if self.talk:
            self.progress.write(f"step {evaluation.step:>5}/{trainer.config.steps}  train {evaluation.train_loss:.4f}"
                                f"  val {evaluation.val_loss:.4f}  {meter.tokens_per_s():,.0f} tok/s"
                                f"  {meter.seconds():.1f}s")


def _plot(args: argparse.Namespace, name: str, history) -> None:
    from blockspec.train.plot import plot_losses

    Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
    plot_losses({name: history}, args.plot, title=f"{name} on {Path(args.data).name}")


def _summarize(args: argparse.Namespace, outcome, world_size: int) -> None:
    last = outcome.history.evals[-1]
    summary = {"steps": outcome.step, "train_loss": last.train_loss, "val_loss": last.val_loss,
               "tokens_per_s": round(outcome.tokens_per_s, 1), "seconds": round(outcome.seconds, 3),
               "world_size": world_size, "checkpoint": args.out, "plot": args.plot}
    if outcome.peak_flops:  # only against a rate measured on this device (CUDA); none on a CPU
        summary["mfu"] = round(outcome.mfu, 4)
        summary["peak_flops"] = outcome.peak_flops
    if args.json:
        emit_json(summary)
    else:
        print(f"done: {summary['steps']} steps, train {last.train_loss:.4f}, val {last.val_loss:.4f}, "
              f"{summary['tokens_per_s']:,.0f} tok/s, {summary['seconds']:.1f}s"
              + (f"; checkpoint {args.out}" if args.out else ""), file=sys.stdout, flush=True)
