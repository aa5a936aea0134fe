"""The chapter's lab: learned vs sinusoidal positions on Tiny Shakespeare, same seeds, same batches.

    python examples/ablate_positional.py [--steps 600] [--seeds 0,1,2] [--plot ablation.png] [--json]

Trains examples/specs/tiny-shakespeare.toml (a learned 64 x 64 position table) and
tiny-shakespeare-sinusoidal.toml (fixed sinusoids, no parameters) with identical
settings: batch k of both runs is the same batch. Prints both validation losses and the
parameter difference (the table's 64 * 64 = 4,096 entries); with several seeds, each
variant's mean ± sample standard deviation, every seed's loss and the paired difference,
because at the chapter's settings one seed's figure moves by more than the gap between them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import attrs
import torch

import blockspec
from blockspec.data.dataset import CharDataset
from blockspec.train.loop import Trainer, make_config

ROOT = Path(__file__).resolve().parents[1]
SPECS = {"learned": ROOT / "examples/specs/tiny-shakespeare.toml",
         "sinusoidal": ROOT / "examples/specs/tiny-shakespeare-sinusoidal.toml"}
DEFAULT_DATA = Path(os.environ.get("BLOCKSPEC_DATA", "tinyshakespeare.txt"))  # the README says where it comes from


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="Tiny Shakespeare (or any text)")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0, help="one seed (default 0)")
    parser.add_argument("--seeds", type=seed_list, metavar="S1,S2", help="several seeds, e.g. 0,1,2 (replaces --seed)")
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--embedding-std", type=float, help="override the specs' [init] embedding_std: the token "
                        "embedding ~ N(0, std^2) (the shipped specs set 1.0; without [init], GPT-2's 0.02)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest for this size)")
    parser.add_argument("--plot", metavar="FILE", help="write both runs' loss curves to one PNG")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--chapter", action="store_true",
                        help="the chapter's setting: embedding std 1.0, lr 1e-2, batch 64 (see docs/training.md)")
    args = parser.parse_args()
    if args.chapter:  # a from-scratch model: nn.Embedding's N(0, 1), on the scale of the amplitude-1 sinusoids
        args.embedding_std, args.lr, args.batch_size = 1.0, 1e-2, 64
    args.seeds = args.seeds or [args.seed]
    return args


def seed_list(text: str) -> list[int]:
    """"0,1,2" -> [0, 1, 2]: distinct integers, since a repeated seed is the same run twice."""
    try:
        seeds = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, found {text!r}") from None
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"a seed given twice in {text!r} would train the same run twice")
    return seeds


def train_one(name: str, data: CharDataset, args: argparse.Namespace, registry, seed: int) -> dict:
    spec = blockspec.load_spec(SPECS[name], registry)
    if args.embedding_std is not None:  # the spec's own [init], changed: build() draws it like any other
        spec = attrs.evolve(spec, init=attrs.evolve(spec.init, embedding_std=args.embedding_std))
    config = make_config({"steps": args.steps, "batch_size": args.batch_size, "lr": args.lr, "seed": seed,
                          "eval_every": args.eval_every})
    model = blockspec.build(spec, registry=registry, seed=seed)
    trainer = Trainer(model, data, config)
    started = time.perf_counter()
    trainer.run(on_eval=lambda t, e: print(f"  {name:<10} seed {seed} step {e.step:>4}  val {e.val_loss:.4f}",
                                            file=sys.stderr, flush=True))
    last = trainer.history.evals[-1]
    return {"spec": spec.source, "embedding_std": spec.init.token_embedding_std, "parameters": blockspec.count_parameters(spec, registry).exact,
            "train_loss": last.train_loss, "val_loss": last.val_loss,
            "seconds": round(time.perf_counter() - started, 1), "history": trainer.history}


def main() -> int:
    args = parse_args()
    torch.set_num_threads(args.threads)
    registry = blockspec.load_registry()
    try:
        data = CharDataset.from_file(args.data)
        runs = {name: [train_one(name, data, args, registry, seed) for seed in args.seeds] for name in SPECS}
    except blockspec.BlockspecError as error:
        print(f"ablate_positional: error: {error}", file=sys.stderr)
        return 2
    if args.plot:
        from blockspec.train.plot import plot_losses

        seeds = ",".join(map(str, args.seeds))
        plot_losses({f"{n} seed {s}": r["history"] for n, rs in runs.items() for s, r in zip(args.seeds, rs)},
                    args.plot, title=f"learned vs sinusoidal positions, {args.steps} steps, seeds {seeds}")
    report(runs, args)
    return 0


def spread(values: list[float]) -> dict:
    """Mean and sample standard deviation (0 for one value), with the values themselves."""
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "std": std, "runs": values}


def summary(runs: list[dict]) -> dict:
    """One variant over its seeds: parameters, train and validation loss spread, seconds per run."""
    return {"spec": runs[0]["spec"], "embedding_std": runs[0]["embedding_std"], "parameters": runs[0]["parameters"],
            "train_loss": spread([r["train_loss"] for r in runs]), "val_loss": spread([r["val_loss"] for r in runs]),
            "seconds": [r["seconds"] for r in runs]}


def report(runs: dict, args: argparse.Namespace) -> None:
    variants = {name: summary(rs) for name, rs in runs.items()}
    difference = variants["learned"]["parameters"] - variants["sinusoidal"]["parameters"]
    gap = spread([a["val_loss"] - b["val_loss"] for a, b in zip(runs["learned"], runs["sinusoidal"])])
    if args.json:
        print(json.dumps({**variants, "val_loss_difference": gap, "parameter_difference": difference,
                          "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr, "seeds": args.seeds}))
        return
    print(f"{'positions':<12}{'parameters':>12}{'seeds':>7}{'train loss':>18}{'val loss':>18}")
    for name, row in variants.items():
        train, val = row["train_loss"], row["val_loss"]
        print(f"{name:<12}{row['parameters']:>12,}{len(args.seeds):>7}{train['mean']:>10.4f} ± {train['std']:.4f}"
              f"{val['mean']:>10.4f} ± {val['std']:.4f}")
    for name, row in variants.items():
        print(f"{name} val loss per seed: " + ", ".join(f"{s}: {v:.4f}" for s, v in zip(args.seeds, row["val_loss"]["runs"])))
    print(f"learned - sinusoidal, val loss, paired over seeds: {gap['mean']:+.4f} ± {gap['std']:.4f}")
    print(f"parameter difference: {difference:,} (the learned 64 x 64 position table)")


if __name__ == "__main__":
    raise SystemExit(main())
