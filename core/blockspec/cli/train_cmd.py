"""`blockspec train`: train a spec on a text file (characters) or a prepared dataset (any tokenizer); torchrun-aware."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from blockspec.checkpoint.layout import CHECKPOINT
from blockspec.outputs.targets import check_writable_target, same_path
from blockspec.train.plot import PLOT_IMAGE
from blockspec.cli.common import (MEMORY_FLAGS, add_device_argument, add_json_argument, add_memory_check_argument,
                                  add_plot_argument, check_plot_file, emit_json, flag_names, memory_limit,
                                  registry_with_warnings, resolve_device, seed_int)
from blockspec.cli.training_flags import FLAGS as TRAINING_FLAGS
from blockspec.cli.training_flags import SETTINGS as TRAINING_SETTINGS
from blockspec.cli.training_flags import add_training_arguments, training_settings

SETTINGS = (*TRAINING_SETTINGS, "seed")
FLAGS = {**TRAINING_FLAGS, "$.seed": "--seed", "overwrite": "--force", "fsdp": "--fsdp", "ddp": "DDP (no --fsdp)",
         **MEMORY_FLAGS}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("train", help="train a spec on a text file (characters) or a prepared dataset")
    parser.add_argument("spec", metavar="SPEC", help="TOML spec file; a checkpoint or Hugging Face directory "
                        "to fine-tune from its weights (and its tokenizer, if it has one)")
    parser.add_argument("--data", required=True, metavar="FILE|DIR",
                        help="UTF-8 text (characters; first 90%% train, last 10%% validation), or a directory "
                             "written by blockspec data prepare (its tokens and tokenizer)")
    add_training_arguments(parser)
    parser.add_argument("--seed", type=seed_int, metavar="S", help="seed for weights and batches (default 0)")
    parser.add_argument("--out", metavar="CKPT", help="checkpoint directory, written atomically at the end "
                        "(default with --resume: the resumed checkpoint)")
    parser.add_argument("--resume", metavar="CKPT", help="continue from a checkpoint: its step, optimizer, settings")
    parser.add_argument("--adapters", metavar="FILE.toml", help="[[adapters]] tables (LoRA, DoRA, ...) to train over "
                        "the frozen checkpoint SPEC; --out then holds only the adapters and a reference to SPEC")
    add_plot_argument(parser, "write the training and validation loss curves to FILE")
    add_device_argument(parser)
    add_memory_check_argument(parser)
    parser.add_argument("--force", action="store_true", help="replace --out if it is a checkpoint and --plot if it is a plot image")
    parser.add_argument("--fsdp", action="store_true", help="under torchrun: FSDP2 sharding instead of DDP")
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
    finally:
        close_world(world, finished=finished)
    if world.size > 1:
        _exit_before_finalizers(code)
    return code


def _exit_before_finalizers(code: int) -> None:
    """End a finished multi-rank run now. gloo's worker threads can still be torn down while the
    interpreter finalizes FSDP's state, and that aborts the process (SIGABRT, 'terminate called
    without an active exception') after the work and the checkpoint are done; every output is
    already written and the group left, so only the finalizers are skipped."""
    import os

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


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
        inputs = [None if spec_is_resumed else args.spec, args.data, None if resuming_in_place else args.resume,
                  args.adapters]
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
    run = training.plan(args.spec, args.data, training_settings(args, SETTINGS), registry=registry,
                        resume=args.resume, adapters=args.adapters, out=args.out, checkpoint_every=args.checkpoint_every,
                        replace_out=args.replace_out, strategy="fsdp" if args.fsdp else "ddp", measure_peak=True,
                        memory_check=not args.no_memory_check, threads=args.threads)
    trainer = training.start(run, registry=registry, world=world)
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
                                f"  val {evaluation.val_loss:.4f}{bits_per_byte_text(evaluation)}  {meter.tokens_per_s():,.0f} tok/s"
                                f"  {meter.seconds():.1f}s")


def bits_per_byte_text(evaluation) -> str:
    """The validation bits per byte as train's and sweep's lines show it ("" when it was not measured)."""
    return "" if evaluation.val_bpb is None else f" ({evaluation.val_bpb:.4f} bits/byte)"


def _plot(args: argparse.Namespace, name: str, history) -> None:
    from blockspec.train.plot import plot_losses

    Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
    plot_losses({name: history}, args.plot, title=f"{name} on {Path(args.data).name}")


def _summarize(args: argparse.Namespace, outcome, world_size: int) -> None:
    last = outcome.history.evals[-1]
    summary = {"steps": outcome.step, "train_loss": last.train_loss, "val_loss": last.val_loss, "val_bpb": last.val_bpb,
               "tokens_per_s": round(outcome.tokens_per_s, 1), "seconds": round(outcome.seconds, 3),
               "world_size": world_size, "checkpoint": args.out, "plot": args.plot}
    if outcome.peak_flops:  # only against a rate measured on this device (CUDA); none on a CPU
        summary["mfu"] = round(outcome.mfu, 4)
        summary["peak_flops"] = outcome.peak_flops
    if args.json:
        emit_json(summary)
    else:
        print(f"done: {summary['steps']} steps, train {last.train_loss:.4f}, val {last.val_loss:.4f}{bits_per_byte_text(last)}, "
              f"{summary['tokens_per_s']:,.0f} tok/s, {summary['seconds']:.1f}s"
              + (f"; checkpoint {args.out}" if args.out else ""), file=sys.stdout, flush=True)
