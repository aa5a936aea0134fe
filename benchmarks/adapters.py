"""LoRA fine-tuning against full fine-tuning of the same model, and blockspec's LoRA against PEFT's, in one run.

    python benchmarks/adapters.py [--rounds R] [--batch B] [--context T] [--threads N] [--no-memory]

(or ``python benchmarks/run.py --sections adapters``). GPT-2 small: the gpt2-small case's spec and its seed-0
weights, the context shortened to ``CONTEXT`` so that a step of full fine-tuning stays affordable on a CPU (the
positional table shrinks with it; every other weight is the case's). Three contenders take the same batches
(``batch_seed(0, "train", k)`` over random ids: cost does not depend on what the tokens say) and the same AdamW
(lr 3e-3, betas (0.9, 0.99), no decay, gradients clipped at 1.0):

- ``full``: every weight trains, through the library's ``Trainer``;
- ``lora``: LoRA rank 8, alpha 16 on ``@attention`` (each block's ``attn.qkv`` and ``attn.proj``), the base
  frozen by ``freeze_base``, through the same ``Trainer``;
- ``peft``: PEFT's LoRA (same rank and alpha, and a copy of blockspec's A matrices, so both train the same
  function) on ``attn.c_attn`` and ``attn.c_proj`` of the Hugging Face GPT2LMHeadModel carrying the same base
  weights, stepped by the loop a PEFT user writes.

Measured: seconds per step (interleaved rounds after warm-up, ratios lora / full and lora / peft), the bytes
of every AdamW state tensor after the steps, and the peak training memory of each contender in a fresh process
(``peak_memory``). The losses of the timed steps come along: lora and peft must agree step by step.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a script: the repository root holds the benchmarks package

import attrs  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import blockspec  # noqa: E402
from benchmarks.cases import by_name  # noqa: E402
from benchmarks.memory import MMAP_THRESHOLD, _release_heap, _status_kib  # noqa: E402
from benchmarks.peers import build_hf  # noqa: E402
from benchmarks.timing import Timing, interleave, paired_ratio  # noqa: E402
from benchmarks.trainer_overhead import CLIP, LR, SEED, token_stream  # noqa: E402
from blockspec.data.dataset import CharDataset, batch_seed  # noqa: E402
from blockspec.modules.adapter import freeze_base  # noqa: E402
from blockspec.train.loop import Trainer, TrainConfig  # noqa: E402
from blockspec.train.optim import BETAS  # noqa: E402

RANK, ALPHA = 8, 16.0
TARGETS = ("@attention",)  # every linear layer of each attention: blocks.*.attn.qkv and blocks.*.attn.proj
PEFT_TARGETS = ("attn.c_attn", "attn.c_proj")  # a bare "c_proj" would also take every MLP's c_proj
PEFT_NAMES = {"qkv": "c_attn", "proj": "c_proj"}  # blockspec's attention projections -> HF GPT-2's
BATCH, CONTEXT, ROUNDS, WARMUP = 2, 128, 5, 3
CONTENDERS = ("full", "lora", "peft")
STATE_TARGET, STEP_TARGET = 0.02, 1.0  # issue 26: state <= 2% of full's; step time <= 1.0x full's and PEFT's


@dataclass
class Contender:
    """One way of fine-tuning: its step (returning the loss), its optimizer, and the losses it saw."""

    step: Callable[[], float]
    optimizer: torch.optim.Optimizer
    trainable: int
    losses: list[float] = field(default_factory=list)

    def __call__(self) -> None:
        self.losses.append(self.step())


class PeftStep:
    """The step a PEFT user writes: forward, cross-entropy, backward, clip, AdamW over the trainable parameters."""

    def __init__(self, model: nn.Module, data: CharDataset, batch: int, length: int) -> None:
        self.model, self.data, self.batch, self.length, self.index = model.train(), data, batch, length, 0
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.trainable, lr=LR, betas=BETAS, weight_decay=0.0)

    def __call__(self) -> float:
        x, y = self.data.batch("train", size=self.batch, length=self.length, seed=batch_seed(SEED, "train", self.index))
        logits = self.model(input_ids=x, use_cache=False).logits  # (B, T, |V|)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())  # (B*T, |V|) vs (B*T,)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.trainable, CLIP)
        self.optimizer.step()
        self.index += 1
        return loss.item()


def specs(base: blockspec.ModelSpec, registry: blockspec.Registry,
          context: int | None = CONTEXT) -> tuple[blockspec.ModelSpec, blockspec.ModelSpec]:
    """The base spec (its context shortened) and the same spec with LoRA on the attention projections."""
    if context is not None:
        base = attrs.evolve(base, model=attrs.evolve(base.model, context_length=context))
    entry = {"use": "lora", "targets": list(TARGETS), "rank": RANK, "alpha": ALPHA}
    return base, blockspec.structure_spec({**blockspec.spec_to_dict(base), "adapters": [entry]}, registry)


def gpt2_small(registry: blockspec.Registry) -> blockspec.ModelSpec:
    (case,) = by_name(["gpt2-small"])
    return case.spec(registry)


def peft_model(spec: blockspec.ModelSpec, base: nn.Module | None = None, lora: nn.Module | None = None) -> nn.Module:
    """PEFT's LoRA on the HF copy (``base``'s weights, when given), with ``lora``'s A and B when given."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=list(PEFT_TARGETS),
                        fan_in_fan_out=True)  # GPT-2's Conv1D stores (in, out)
    model = get_peft_model(build_hf(spec, "gpt2", base), config)
    if lora is not None:
        copy_lora(lora, model)
    return model


def copy_lora(lora: nn.Module, peft: nn.Module) -> None:
    """blockspec's lora_A and lora_B into PEFT's, layer by layer: both are (r, in) and (out, r) either way."""
    hf = dict(peft.named_modules())
    for path in lora.adapted:
        _, layer, _, name = path.split(".")  # blocks.{i}.attn.{qkv|proj}
        target = hf[f"base_model.model.transformer.h.{layer}.attn.{PEFT_NAMES[name]}"]
        mine = lora.get_submodule(path)
        with torch.no_grad():
            target.lora_A["default"].weight.copy_(mine.lora_A.weight)
            target.lora_B["default"].weight.copy_(mine.lora_B.weight)


def _trained(model: nn.Module, data: CharDataset, config: TrainConfig) -> Contender:
    """The library's Trainer on ``model``; a model with adapters has its base frozen first."""
    if getattr(model, "adapted", None):
        freeze_base(model)  # the Trainer may do it itself; again is harmless
    trainer = Trainer(model, data, config)
    return Contender(trainer.train_step, trainer.optimizer, _trainable(model))


def _trainable(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def contenders(base: blockspec.ModelSpec, adapted: blockspec.ModelSpec, registry: blockspec.Registry,
               batch: int, only: str | None = None) -> dict[str, Contender]:
    """Every contender (or ``only`` one) on the same batches; together, PEFT's copy carries blockspec's weights."""
    data = token_stream(base.model.vocab_size)
    config = TrainConfig(steps=10**9, batch_size=batch, lr=LR, grad_clip=CLIP, seed=SEED)
    full = blockspec.build(base, registry=registry, seed=SEED) if only in (None, "full") else None
    lora = blockspec.build(adapted, registry=registry, seed=SEED) if only in (None, "lora") else None
    made = {}
    if only in (None, "peft"):
        step = PeftStep(peft_model(base, full, lora), data, batch, base.model.context_length)
        made["peft"] = Contender(step, step.optimizer, _trainable(step.model))
    if full is not None:
        made["full"] = _trained(full, data, config)
    if lora is not None:
        made["lora"] = _trained(lora, data, config)
    return {name: made[name] for name in CONTENDERS if name in made}


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in the optimizer's state (AdamW: exp_avg, exp_avg_sq and step per parameter)."""
    return sum(value.nbytes for state in optimizer.state.values() for value in state.values()
               if isinstance(value, torch.Tensor))


def compare(registry: blockspec.Registry, rounds: int = ROUNDS, threads: int | None = None, *,
            batch: int = BATCH, context: int = CONTEXT, memory: bool = True,
            spec: blockspec.ModelSpec | None = None) -> dict[str, object]:
    """Step time, optimizer state and (``memory``, GPT-2 small only) peak training memory of the three contenders.

    ``spec`` (a GPT-2-shaped spec; default the gpt2-small case's) lets a test run the section at a tiny size.
    """
    if memory and spec is not None:
        raise ValueError("the memory workers measure the gpt2-small case only: pass memory=False with a spec")
    base, adapted = specs(spec or gpt2_small(registry), registry, context)
    made = contenders(base, adapted, registry, batch)
    for contender in made.values():  # interleave's own warm-up stops after 2 s: full's first steps fault in its state
        for _ in range(WARMUP):
            contender()
    timings = interleave(dict(made), rounds=rounds, warmup=1, target_s=0.0)
    result = summary(made, timings)
    result.update(batch=batch, tokens=context, rank=RANK, alpha=ALPHA, targets=list(TARGETS),
                  peft_targets=list(PEFT_TARGETS), parameters=sum(p.numel() for p in _parameters(made["full"])))
    if memory:
        result["memory"] = {name: peak_memory(name, batch, context, threads or torch.get_num_threads())
                            for name in CONTENDERS}
    return result


def _parameters(contender: Contender) -> list[nn.Parameter]:
    return [p for group in contender.optimizer.param_groups for p in group["params"]]


def summary(made: dict[str, Contender], timings: dict[str, Timing]) -> dict[str, object]:
    """Timings, state bytes, trainable counts and losses, with the ratios the issue's targets are about."""
    state = {name: optimizer_state_bytes(c.optimizer) for name, c in made.items()}
    full, lora, peft = (timings[n] for n in CONTENDERS)
    losses = {name: c.losses for name, c in made.items()}
    return {
        "timings": {name: t.as_dict() for name, t in timings.items()},
        "ratios": {"lora/full": lora.median / full.median, "lora/peft": lora.median / peft.median},
        "ratios_paired": {"lora/full": paired_ratio(lora, full), "lora/peft": paired_ratio(lora, peft)},
        "optimizer_state_bytes": state, "state_ratio": state["lora"] / state["full"],
        "trainable": {name: c.trainable for name, c in made.items()}, "losses": losses,
        "loss_difference_lora_peft": max(abs(a - b) for a, b in zip(losses["lora"], losses["peft"], strict=True)),
    }


def peak_memory(name: str, batch: int, context: int, threads: int) -> dict[str, int]:
    """One contender's training memory, measured in a fresh Python process (``_worker``)."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD, "BENCH_THREADS": str(threads)}
    command = [sys.executable, str(Path(__file__)), "--worker", name, "--batch", str(batch), "--context", str(context)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"adapter memory worker for {name} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _worker(name: str, batch: int, context: int) -> dict[str, int]:
    """Resident-set figures of two training steps, from the kernel's high-water mark (VmHWM).

    VmHWM is what ``ru_maxrss`` reports, but /proc/self/clear_refs resets it, so the build's transients
    are left out; tracemalloc sees none of torch's allocations, and on a CPU torch keeps no allocator
    statistics. ``peak_bytes``: the most resident during the steps above the process before the build
    (weights, gradients, optimizer state, activations); ``step_peak_bytes``: the second step's peak above
    what stays resident after the first (memory.py's figure: gradients and activations, not the state).
    """
    for module in ("transformers.models.gpt2.modeling_gpt2", "peft"):  # before the baseline: imports do not count
        importlib.import_module(module)
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    registry = blockspec.load_registry()
    base, adapted = specs(gpt2_small(registry), registry, context)
    _release_heap()
    before = _status_kib("VmRSS")
    step = contenders(base, adapted, registry, batch, only=name)[name]
    _release_heap()
    Path("/proc/self/clear_refs").write_text("5")  # the high-water mark restarts at what the model holds
    step()  # AdamW's state is allocated here
    first = _status_kib("VmHWM")
    _release_heap()
    resident = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    step()
    second = _status_kib("VmHWM")
    return {"peak_bytes": (max(first, second) - before) * 1024, "step_peak_bytes": (second - resident) * 1024,
            "resident_after_step_bytes": (resident - before) * 1024}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--context", type=int, default=CONTEXT)
    parser.add_argument("--threads", type=int, help="intra-op threads (default: torch's own choice)")
    parser.add_argument("--no-memory", action="store_true", help="skip the fresh-process memory figures")
    parser.add_argument("--json", type=Path, help="also write the figures there")
    parser.add_argument("--worker", choices=CONTENDERS, help=argparse.SUPPRESS)  # one memory measurement
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args.worker, args.batch, args.context)))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    from benchmarks.report import adapter_lines

    result = compare(blockspec.load_registry(), args.rounds, args.threads, batch=args.batch, context=args.context,
                     memory=not args.no_memory)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print("\n".join(adapter_lines({"adapters": result})))


if __name__ == "__main__":
    main()
