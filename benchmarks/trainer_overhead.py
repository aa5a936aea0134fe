"""What the trainer itself costs: tokens/s of the library's training step (``Trainer.train_step``) against a
minimal hand-written loop on the same model, batches and AdamW settings, timed interleaved in one run.

    python benchmarks/trainer_overhead.py [SPEC ...] [--batch-size B] [--rounds R] [--precision P] [--threads N]

Both sides draw batch k with ``batch_seed(seed, "train", k)`` from the same token stream, clip gradients at
1.0 and step AdamW(lr 3e-3, betas (0.9, 0.99), no decay), each on its own copy of the model built with the same
seed. The ratio is the median over rounds of hand-loop seconds / trainer seconds (issue 16 asks >= 0.95).
The token stream is random ids over the spec's vocabulary: throughput does not depend on what the tokens say.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a script: the repository root holds the benchmarks package

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import blockspec  # noqa: E402
from benchmarks.timing import interleave, paired_ratio  # noqa: E402
from blockspec.data.dataset import CharDataset, batch_seed  # noqa: E402
from blockspec.train.loop import Trainer, TrainConfig  # noqa: E402

SPECS = (HERE.parent / "examples/specs/tiny-shakespeare.toml", HERE / "specs/bpe-10m.toml")
SMALL_MODEL = 5_000_000  # as `blockspec train`: one intra-op thread below this many parameters
LR, BETAS, CLIP, SEED = 3e-3, (0.9, 0.99), 1.0, 0


def token_stream(vocab_size: int, length: int = 200_000) -> CharDataset:
    ids = torch.randint(0, vocab_size, (length,), generator=torch.Generator().manual_seed(SEED))  # (L,)
    return CharDataset(ids, tokenizer=None, source="random ids")


class HandLoop:
    """The loop a user would write: batch, forward, cross-entropy, backward, clip, AdamW step."""

    def __init__(self, spec, data: CharDataset, batch_size: int, precision: str) -> None:
        self.model = blockspec.build(spec, seed=SEED).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LR, betas=BETAS, weight_decay=0.0)
        self.data, self.batch_size, self.length = data, batch_size, spec.model.context_length
        self.dtype = torch.bfloat16 if precision == "bf16-mixed" else None
        self.step = 0

    def __call__(self) -> None:
        x, y = self.data.batch("train", size=self.batch_size, length=self.length,
                               seed=batch_seed(SEED, "train", self.step))
        with torch.autocast("cpu", dtype=self.dtype or torch.bfloat16, enabled=self.dtype is not None):
            logits = self.model(x)  # (B, T, |V|)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())  # (B*T, |V|) vs (B*T,)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIP)
        self.optimizer.step()
        self.step += 1


def measure(path: Path, batch_size: int, rounds: int, precision: str, threads: int | None,
            target_s: float = 1.0) -> dict[str, float]:
    """Tokens/s of both loops on ``path``'s model, each sample at least ``target_s`` seconds of steps."""
    spec = blockspec.load_spec(path)
    data = token_stream(spec.model.vocab_size)
    config = TrainConfig(steps=10**9, batch_size=batch_size, lr=LR, grad_clip=CLIP, seed=SEED, precision=precision)
    trainer = Trainer(blockspec.build(spec, seed=SEED), data, config)
    hand = HandLoop(spec, data, batch_size, precision)
    parameters = sum(p.numel() for p in hand.model.parameters())
    torch.set_num_threads(threads or (1 if parameters < SMALL_MODEL else THREADS))
    timings = interleave({"trainer": trainer.train_step, "hand": hand}, rounds=rounds, warmup=2, target_s=target_s)
    tokens = batch_size * spec.model.context_length
    return {"name": spec.model.name, "parameters": parameters, "threads": torch.get_num_threads(),
            "tokens": tokens, "trainer": tokens / timings["trainer"].median, "hand": tokens / timings["hand"].median,
            "ratio": paired_ratio(timings["hand"], timings["trainer"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*", type=Path, default=list(SPECS), metavar="SPEC")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--precision", choices=("fp32", "bf16-mixed"), default="fp32")
    parser.add_argument("--threads", type=int, help="intra-op threads (default: as `blockspec train` picks)")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, CPU, {args.precision}, batch {args.batch_size}, median of {args.rounds} "
          "interleaved rounds")
    print(f"{'spec':<18}{'params':>12}{'threads':>9}{'trainer tok/s':>15}{'hand tok/s':>12}{'ratio':>8}")
    for path in args.specs:
        row = measure(path, args.batch_size, args.rounds, args.precision, args.threads)
        verdict = "ok" if row["ratio"] >= 0.95 else "BELOW 0.95"
        print(f"{row['name']:<18}{row['parameters']:>12,}{row['threads']:>9}{row['trainer']:>15,.0f}"
              f"{row['hand']:>12,.0f}{row['ratio']:>8.3f}  {verdict}", flush=True)


THREADS = torch.get_num_threads()

if __name__ == "__main__":
    main()
