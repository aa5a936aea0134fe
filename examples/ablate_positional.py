"""The chapter's lab: learned vs sinusoidal positions on Tiny Shakespeare, same seed, same batches.

    python examples/ablate_positional.py [--steps 600] [--plot ablation.png] [--json]

Trains examples/specs/tiny-shakespeare.toml (a learned 64 x 64 position table) and
tiny-shakespeare-sinusoidal.toml (fixed sinusoids, no parameters) with identical
settings: batch k of both runs is the same batch. Prints both validation losses and the
parameter difference (the table's 64 * 64 = 4,096 entries).
"""

from __future__ import annotations

import argparse
import json
import os
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
DEFAULT_DATA = Path(os.environ.get("BLOCKSPEC_DATA", ROOT.parent / "shared/data/tinyshakespeare.txt"))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="Tiny Shakespeare (or any text)")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
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
    return args


def train_one(name: str, data: CharDataset, args: argparse.Namespace, registry) -> dict:
    spec = blockspec.load_spec(SPECS[name], registry)
    if args.embedding_std is not None:  # the spec's own [init], changed: build() draws it like any other
        spec = attrs.evolve(spec, init=attrs.evolve(spec.init, embedding_std=args.embedding_std))
    config = make_config({"steps": args.steps, "batch_size": args.batch_size, "lr": args.lr, "seed": args.seed,
                          "eval_every": args.eval_every})
    model = blockspec.build(spec, registry=registry, seed=args.seed)
    trainer = Trainer(model, data, config)
    started = time.perf_counter()
    trainer.run(on_eval=lambda t, e: print(f"  {name:<10} step {e.step:>4}  val {e.val_loss:.4f}",
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
        runs = {name: train_one(name, data, args, registry) for name in SPECS}
    except blockspec.BlockspecError as error:
        print(f"ablate_positional: error: {error}", file=sys.stderr)
        return 2
    if args.plot:
        from blockspec.train.plot import plot_losses

        plot_losses({n: r["history"] for n, r in runs.items()}, args.plot,
                    title=f"learned vs sinusoidal positions, {args.steps} steps, seed {args.seed}")
    report(runs, args)
    return 0


def report(runs: dict, args: argparse.Namespace) -> None:
    difference = runs["learned"]["parameters"] - runs["sinusoidal"]["parameters"]
    if args.json:
        body = {n: {k: v for k, v in r.items() if k != "history"} for n, r in runs.items()}
        print(json.dumps({**body, "parameter_difference": difference, "steps": args.steps,
                          "batch_size": args.batch_size, "lr": args.lr, "seed": args.seed,
                          "embedding_std": {n: r["embedding_std"] for n, r in runs.items()}}))
        return
    print(f"{'positions':<12}{'parameters':>12}{'train loss':>12}{'val loss':>10}{'seconds':>9}")
    for name, run in runs.items():
        print(f"{name:<12}{run['parameters']:>12,}{run['train_loss']:>12.4f}{run['val_loss']:>10.4f}"
              f"{run['seconds']:>9.1f}")
    print(f"parameter difference: {difference:,} (the learned 64 x 64 position table)")


if __name__ == "__main__":
    raise SystemExit(main())
