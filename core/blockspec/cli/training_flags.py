"""The flags that say how a run trains, defined once: `train` and `sweep` both take them, spelled and checked alike.

What a sweep varies (the spec) and where runs start (`train`'s `--seed` and `--resume`, a sweep's
`--seeds`) are each command's own; how every run trains is this module's.
"""

from __future__ import annotations

import argparse
from typing import Any

from blockspec.cli.common import (batch_count, non_negative_float, non_negative_int, positive_float, positive_int,
                                  thread_count)
from blockspec.train.threads import SMALL_MODEL

PRECISIONS = ("fp32", "bf16-mixed")  # as blockspec.train.loop.PRECISIONS, without importing torch here
# the TrainConfig fields these flags set (a sweep's seed is per run; train adds --seed)
SETTINGS = ("steps", "batch_size", "lr", "weight_decay", "eval_every", "eval_batches", "warmup", "min_lr",
            "grad_accum", "precision", "compile")
# the library names settings and parameters; the user knows them as flags
FLAGS = {**{f"$.{name}": f"--{name.replace('_', '-')}" for name in SETTINGS},
         **{name: f"--{name.replace('_', '-')}" for name in SETTINGS}}


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """Every flag of ``SETTINGS``, then ``--checkpoint-every`` and ``--threads``; defaults None: unset."""
    _add_schedule(parser)
    parser.add_argument("--grad-accum", type=positive_int, metavar="K", help="split each step's batch into K "
                        "micro-batches and accumulate their gradients: less memory, same step (default 1)")
    parser.add_argument("--precision", choices=PRECISIONS, help="bf16-mixed: autocast to bfloat16 (float16 with "
                        "loss scaling on a GPU without bfloat16); weights stay float32 (default fp32)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile the model (the first steps pay for compiling; default: no)")
    parser.add_argument("--eval-every", type=non_negative_int, metavar="K",
                        help="validate every K steps; 0: at the end (default 100)")
    parser.add_argument("--eval-batches", type=positive_int, metavar="N", help="batches per validation (default 20)")
    parser.add_argument("--checkpoint-every", type=non_negative_int, default=0, metavar="K",
                        help="also checkpoint every K steps, so an interrupted run continues (default 0: only at "
                             "the end)")
    parser.add_argument("--threads", type=thread_count, metavar="N", help="CPU threads per process (default: 1 for "
                        f"models under {SMALL_MODEL / 1e6:g}M parameters, else torch's default)")


def _add_schedule(parser: argparse.ArgumentParser) -> None:
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


def training_settings(args: argparse.Namespace, names: tuple[str, ...] = SETTINGS) -> dict[str, Any]:
    """The settings the command line set explicitly (the others stay the resumed run's, or the defaults)."""
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}
