"""`blockspec sweep`: train every combination of varied spec values, times seeds, on the same batches."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

from blockspec.cli.common import (MEMORY_FLAGS, UsageError, add_device_argument, add_json_argument,
                                  add_memory_check_argument, emit_json, flag_names, memory_limit,
                                  registry_with_warnings, resolve_device)
from blockspec.train.seeds import SEEDS
from blockspec.cli.training_flags import FLAGS as TRAINING_FLAGS
from blockspec.cli.training_flags import add_training_arguments, training_settings
from blockspec.cli.train_cmd import bits_per_byte_text

if TYPE_CHECKING:
    from blockspec.train.progress import Progress

FLAGS = {**TRAINING_FLAGS, "seeds": "--seeds", "overwrite": "--force", "force": "--force", "vary": "--vary",
         **MEMORY_FLAGS}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("sweep", help="train every combination of varied spec values over several seeds")
    parser.add_argument("spec", metavar="SPEC", help="TOML spec file (or a checkpoint: its spec, not its weights)")
    parser.add_argument("--data", required=True, metavar="FILE|DIR",
                        help="UTF-8 text (characters) or a directory written by blockspec data prepare")
    parser.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2",
                        help="a dotted spec key and its values, e.g. positional.use=learned,sinusoidal,rope; "
                             "repeat for more keys (every combination is trained)")
    parser.add_argument("--seeds", default="0", metavar="S1,S2", help="seeds to train each variant with (default 0)")
    parser.add_argument("--out", required=True, metavar="DIR", help="sweep folder: sweep.json, runs/, results.*")
    add_training_arguments(parser)  # each run trains as `blockspec train` would
    add_device_argument(parser)
    add_memory_check_argument(parser)
    parser.add_argument("--force", action="store_true", help="replace the runs whose base (spec, data, "
                        "settings) or steps changed, retraining them; the folder's other runs and files stay")
    add_json_argument(parser, "a JSON summary at the end instead of a line per run")
    parser.set_defaults(run=run)


def parse_vary(texts: list[str]) -> dict[str, list[str]]:
    """``KEY=V1,V2`` flags -> {key: [values]}; a key given twice is refused."""
    vary: dict[str, list[str]] = {}
    for text in texts:
        key, equals, values = text.partition("=")
        if not equals or not key.strip():
            raise UsageError(f"--vary: expected KEY=V1,V2 (e.g. positional.use=learned,rope), found {text!r:.60}")
        if key.strip() in vary:
            raise UsageError(f"--vary: {key.strip()} given twice; list all its values in one --vary")
        items = [v.strip() for v in values.split(",")]
        if not all(items):
            raise UsageError(f"--vary {key.strip()}: expected values separated by commas, found {values!r:.60}")
        vary[key.strip()] = items
    return vary


def parse_seeds(text: str) -> list[int]:
    items = [t.strip() for t in text.split(",")]
    if not all(re.fullmatch(r"-?\d+", t) for t in items):
        raise UsageError(f"--seeds: expected integers separated by commas (e.g. 0,1,2), found {text!r:.60}")
    seeds = [int(t) for t in items]
    if not all(SEEDS[0] <= seed <= SEEDS[1] for seed in seeds):
        raise UsageError(f"--seeds: expected integers from {SEEDS[0]} to {SEEDS[1]}, found {text!r:.60}")
    if len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds: expected distinct seeds, found {text!r:.60}")
    return seeds


def run(args: argparse.Namespace) -> int:
    from blockspec.train.sweep import run_sweep

    vary, seeds = parse_vary(args.vary), parse_seeds(args.seeds)
    device = resolve_device(args.device)
    settings = training_settings(args)
    report = _Report()
    with flag_names(FLAGS), memory_limit("--batch-size (or a smaller model)"), report:
        result = run_sweep(args.spec, args.data, vary, args.out, seeds=seeds, settings=settings, force=args.force,
                           checkpoint_every=args.checkpoint_every, device=device, memory_check=not args.no_memory_check,
                           threads=args.threads, registry=registry_with_warnings(),
                           report=None if args.json else report)
    if args.json:
        emit_json({"out": args.out, "runs": len(result.runs), "skipped": sum(r.skipped for r in result.runs),
                   "diverged": sum(r.diverged is not None for r in result.runs),
                   "results": result.rows, "files": [str(f) for f in result.files], "note": result.note})
    else:
        print(f"results: {', '.join(str(f) for f in result.files)}")
        if result.note:
            print(result.note)
    return 0


class _Report:
    """A line per finished run, above a bar over the runs (made when the first run reports their number)."""

    def __init__(self) -> None:
        self.progress: Progress | None = None

    def __enter__(self) -> _Report:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.progress is not None:
            self.progress.close()

    def __call__(self, number: int, total: int, result) -> None:
        if self.progress is None:
            from blockspec.train.progress import Progress

            self.progress = Progress(total=total, initial=number - 1, unit="run")
        name = f"run {number}/{total} {result.variant.label} seed {result.seed}"
        if result.diverged is not None:
            self.progress.write(f"{name}: {result.diverged}")
        else:
            last = result.history.evals[-1]
            done = "already done" if result.skipped else f"{result.tokens_per_s:,.0f} tok/s"
            if result.continued_from:
                done += f", continued from step {result.continued_from}"
            self.progress.write(f"{name}: train {last.train_loss:.4f}  val {last.val_loss:.4f}"
                                f"{bits_per_byte_text(last)}  ({done})")
        self.progress.advance()
