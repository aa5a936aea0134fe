"""The training loop: AdamW on next-character cross-entropy, fixed evaluation batches, resumable.

Instruction data scores some targets only (the others are ``IGNORED_TARGET``): each micro-batch's mean is
weighted by its scored targets (``Trainer.piece_weights``), so a step's loss is their exact mean.

Determinism: weights come from ``build(seed=)``, batch k from ``batch_seed(seed, "train", k)``
and the optimizer state travels with the checkpoint, so the same seed gives the same
losses, and a resumed run continues the uninterrupted one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

import attrs
import torch
import torch.nn.functional as F
from attrs import field, frozen

from blockspec.errors import BlockspecError
from blockspec.modules.transformer import Transformer
from blockspec.registry.components import Component
from blockspec.errors import FieldError, Problem
from blockspec.spec.validators import Check, FieldErrors
from blockspec.modules.adapter import freeze_base
from blockspec.train.checkpointing import Checkpoint
from blockspec.data.dataset import IGNORED_TARGET, DataError, Dataset, batch_seed
from blockspec.data.measure import mean_bits_per_byte
from blockspec.spec.documents import structure_document
from blockspec.train.distributed import Strategy, World, wrap
from blockspec.train.finite import diverged, first_non_finite, non_finite
from blockspec.train.interrupt import StopRequest
from blockspec.train.optim import autocast, grad_scaler, learning_rate, make_optimizer, no_gradient_sync
from blockspec.train.state import load_model_state, load_optimizer_state, model_state, optimizer_state


# Value checks live in the types, so every bad setting is reported in one pass (spec/validators.Check);
# the same Check validates a TrainConfig built in Python.
COUNT = Check(lambda v: v >= 1, "a positive integer", typed=False)
NON_NEGATIVE_INT = Check(lambda v: v >= 0, "an integer >= 0", typed=False)
POSITIVE_NUMBER = Check(lambda v: v > 0.0, "a number > 0.0", typed=False)
NON_NEGATIVE_NUMBER = Check(lambda v: v >= 0.0, "a number >= 0", typed=False)
MIN_LR = Check(lambda v: v is None or v >= 0.0, "a number >= 0, or none (the learning rate itself)", typed=False)
PRECISIONS = ("fp32", "bf16-mixed")
PRECISION = Check(lambda v: v in PRECISIONS, " or ".join(map(repr, PRECISIONS)), typed=False)
GRAD_CLIP = Check(lambda v: v is None or v > 0.0, "a number > 0.0, or none", typed=False)
SEED = Check(lambda v: -(2**63) <= v < 2**64, "an integer from -2**63 to 2**64 - 1 (what torch.manual_seed takes)",
             typed=False)
Count = Annotated[int, COUNT]
Steps = Annotated[int, NON_NEGATIVE_INT]


@frozen(kw_only=True)
class TrainConfig:
    """How to train; saved with each checkpoint so ``--resume`` continues with the same settings."""

    steps: Steps = field(default=600, validator=NON_NEGATIVE_INT)
    batch_size: Count = field(default=32, validator=COUNT)  # global: split over the processes
    lr: Annotated[float, POSITIVE_NUMBER] = field(default=3e-3, validator=POSITIVE_NUMBER)
    weight_decay: Annotated[float, NON_NEGATIVE_NUMBER] = field(default=0.0, validator=NON_NEGATIVE_NUMBER)
    grad_clip: Annotated[float | None, GRAD_CLIP] = field(default=1.0, validator=GRAD_CLIP)
    seed: Annotated[int, SEED] = field(default=0, validator=SEED)
    eval_every: Steps = field(default=100, validator=NON_NEGATIVE_INT)  # 0: only at the end
    eval_batches: Count = field(default=20, validator=COUNT)
    warmup: Steps = field(default=0, validator=NON_NEGATIVE_INT)  # linear warm-up steps (see train/optim.py)
    min_lr: Annotated[float | None, MIN_LR] = field(default=None, validator=MIN_LR)  # cosine floor; None: lr
    grad_accum: Count = field(default=1, validator=COUNT)  # micro-batches per optimizer step
    precision: Annotated[str, PRECISION] = field(default="fp32", validator=PRECISION)
    compile: bool = False  # torch.compile the model

    def __attrs_post_init__(self) -> None:
        errors = []
        if self.min_lr is not None and self.min_lr > self.lr:
            errors.append(FieldError("min_lr", f"expected a number <= the learning rate ({self.lr}), "
                                               f"found {self.min_lr}"))
        if self.batch_size % self.grad_accum:
            errors.append(FieldError("grad_accum", expected=f"a divisor of {{batch_size}} ({self.batch_size})",
                                     found=str(self.grad_accum), names={"batch_size": "batch_size"}))
        if errors:
            raise errors[0] if len(errors) == 1 else FieldErrors(errors)

    @property
    def floor_lr(self) -> float:
        return self.lr if self.min_lr is None else self.min_lr

    def lr_at(self, step: int) -> float:
        """The learning rate of 0-based ``step`` (train/optim.py has the formula)."""
        return learning_rate(step, lr=self.lr, min_lr=self.floor_lr, warmup=self.warmup, steps=self.steps)


class TrainConfigError(BlockspecError, ValueError):
    """A training setting is out of range."""


class NotALanguageModelError(BlockspecError, ValueError):
    """The model's head does not predict the next token, so next-character training cannot use it."""


def check_lm_head(head: Component | None, *, source: str = "the model") -> None:
    """Refuse, before any data or step, a head that does not promise "lm" (logits (B, N, |V|) per position).

    A classifier head would otherwise fail deep inside cross-entropy with a shape message.
    ``head`` is the resolved component (None: unknown, e.g. built without provenance: not refused).
    """
    if head is None or "lm" in head.promises:
        return
    raise NotALanguageModelError(
        f"{source}: $.head.use: training needs a language-model head (one that promises \"lm\": next-token "
        f"logits at every position), found {head.name!r} ({head.distribution}); "
        "use [head] use = \"lm\" to train this spec")


def make_config(settings: dict[str, Any], *, source: str = "training settings") -> TrainConfig:
    """A TrainConfig from plain settings (command-line flags, a checkpoint's JSON) through the strict converter.

    Every bad setting is reported at once, named by its path (``$.lr``), with a did-you-mean for
    unknown ones; ``source`` names where the settings came from. The CLI turns paths into flags.
    """
    return structure_document(settings, TrainConfig, file=source, error=TrainConfigError)


@frozen(kw_only=True)
class Evaluation:
    step: int
    train_loss: float
    val_loss: float
    val_bpb: float | None = None  # bits per byte of the validation text (None: recorded before it was measured)


@attrs.define
class History:
    """Every step's training loss and every evaluation, for reports and plots."""

    train: list[float] = attrs.Factory(list)  # train[k] is the loss of step k + 1
    evals: list[Evaluation] = attrs.Factory(list)

    def to_dict(self) -> dict[str, Any]:
        return {"train": self.train, "evals": [attrs.asdict(e) for e in self.evals]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> History:
        return cls(list(data["train"]), [Evaluation(**e) for e in data["evals"]])


def validation_bpb(data: Dataset, val_loss: float) -> float | None:
    """``val_loss`` as bits per byte of the validation split: the loss is a mean per token over sampled windows,
    an estimate of the split's mean, so it is scaled by the split's tokens per byte (docs/training.md)."""
    tokens, size = data.split_size("val")
    return mean_bits_per_byte(val_loss, tokens, size)


def auxiliary_loss(model: torch.nn.Module) -> torch.Tensor | None:
    """Σ aux_loss_coef·aux_loss over the modules that kept one in their last forward (a mixture of
    experts' load-balancing loss, after a training-mode forward); None when no module did. The
    convention is blockspec.plugin's (Conventions: ``aux_loss``)."""
    terms = [m.aux_loss_coef * m.aux_loss for m in model.modules() if getattr(m, "aux_loss", None) is not None]
    return torch.stack(terms).sum() if terms else None


class Trainer:
    """Owns the (possibly wrapped, possibly compiled) model, its AdamW optimizer and the step count."""

    def __init__(self, model: Transformer, data: Dataset, config: TrainConfig, *, world: World = World(),
                 strategy: Strategy = "ddp", resume: Checkpoint | None = None) -> None:
        check_lm_head(getattr(model, "provenance", {}).get("head"), source=model.spec.model.name)
        self.data, self.config, self.world = data, config, world
        self.spec = model.spec
        self.sharded = world.size > 1 and strategy == "fsdp"
        if resume is not None:
            load_model_state(model, resume.model_state, source="the resumed checkpoint")
        if getattr(model, "adapted", None):  # adapter fine-tuning: the base stays as it is, only the adapters learn
            freeze_base(model)
        self.raw = model
        self.wrapped = wrap(model.to(world.device), world, strategy)  # DDP, or model itself (sharded in place)
        self.model = torch.compile(self.wrapped) if config.compile else self.wrapped
        self.optimizer = make_optimizer(self.raw, lr=config.lr, weight_decay=config.weight_decay)
        self.scaler = grad_scaler(config.precision, world.device)
        self.routers = [m for m in model.modules() if hasattr(m, "aux_loss")]  # found once, not every step
        self.step, self.history, self.train_seconds = 0, History(), 0.0
        self.stop, self._agreed_stop = StopRequest(), False  # a caller's Ctrl-C request; whether any rank had one
        torch.manual_seed(config.seed)  # dropout, if the spec has any
        if resume is not None:
            self._restore(resume)

    def _restore(self, checkpoint: Checkpoint) -> None:
        load_optimizer_state(self.raw, self.optimizer, checkpoint.optimizer_state, sharded=self.sharded)
        self.step = checkpoint.step
        self.history = History.from_dict(checkpoint.training["history"])
        self.train_seconds = float(checkpoint.training.get("train_seconds", 0.0))
        if checkpoint.rng_state is not None:
            torch.set_rng_state(checkpoint.rng_state)

    @property
    def stopping(self) -> bool:
        """Whether to stop after this step: a Ctrl-C request, agreed by every rank at the last step's end."""
        return self.stop.requested if self.world.size == 1 else self._agreed_stop

    @property
    def tokens_per_step(self) -> int:
        return self.config.batch_size * self.spec.model.context_length

    def batch(self, split: str, stream: str, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's share of global batch ``index`` of ``stream``."""
        x, y = self.data.batch(split, size=self.config.batch_size, length=self.spec.model.context_length,
                               seed=batch_seed(self.config.seed, stream, index))
        return self.world.shard(x), self.world.shard(y)

    def micro_batches(self, split: str, stream: str, index: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's share of global batch ``index``, in ``grad_accum`` equal pieces: the same samples
        whatever the number of pieces, so accumulation changes memory, not what is learned."""
        x, y = self.batch(split, stream, index)  # (B / size, T) each
        pieces = self.config.grad_accum
        if pieces == 1:
            return [(x, y)]
        if x.shape[0] % pieces:
            raise TrainConfigError(Problem(
                message=f"{{batch_size}} {self.config.batch_size} over {self.world.size} processes gives "
                        f"{x.shape[0]} rows each, which {{grad_accum}} {pieces} cannot split evenly",
                hint=f"use a {{batch_size}} divisible by {pieces * self.world.size}",
                names={"batch_size": "batch_size", "grad_accum": "grad_accum"}))
        return list(zip(x.chunk(pieces), y.chunk(pieces)))  # (B / size / K, T) each

    def loss(self, x: torch.Tensor, y: torch.Tensor, weight: float = 1.0) -> torch.Tensor:
        """The mean loss per scored target (an ``IGNORED_TARGET`` is not scored), times ``weight``
        (``piece_weights``), plus the routers' auxiliary loss."""
        with autocast(self.config.precision, self.world.device):
            logits = self.model(x)  # (B, T, |V|)
        reduction = "mean" if weight else "sum"  # no scored target: the mean is 0/0, the sum 0 (and its gradient)
        logits, y = logits.float().flatten(0, 1), y.flatten()  # (B*T, |V|) and (B*T,)
        loss = F.cross_entropy(logits, y, reduction=reduction)
        loss = loss if weight == 1.0 else loss * weight
        aux = self._auxiliary() if self.model.training else None
        return loss if aux is None else loss + aux

    def piece_weights(self, pieces: list[tuple[torch.Tensor, torch.Tensor]]) -> list[float]:
        """Each piece's scored targets over the mean piece's, over every rank: the mean of the weighted means is
        then the mean over every scored target, however they fall (1.0 each for data that scores every target).
        A batch that scores nothing weighs 0: its loss is 0 and it moves no weight."""
        if not self.data.masked:
            return [1.0] * len(pieces)
        counts = torch.stack([(y != IGNORED_TARGET).sum() for _, y in pieces]).float()  # (pieces,)
        mean = sum(self.world.means(counts)) / len(pieces)  # the mean piece's, over this rank's pieces and all ranks'
        return [count / mean if mean else 0.0 for count in counts.tolist()]

    def _auxiliary(self) -> torch.Tensor | None:
        terms = [m.aux_loss_coef * m.aux_loss for m in self.routers if m.aux_loss is not None]
        return torch.stack(terms).sum() if terms else None

    def train_step(self) -> float:
        """One AdamW step on the global batch of this step; returns its loss averaged over ranks.

        A loss or gradient norm that is not finite raises DivergedError, and the step is not counted.
        """
        started = time.perf_counter()
        if not self.raw.training:  # after an evaluation; the walk over every module costs on tiny models
            self.model.train()
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.lr_at(self.step)
        self.optimizer.zero_grad(set_to_none=True)
        pieces = self.micro_batches("train", "train", self.step)
        weights = self.piece_weights(pieces)
        total = sum(self._accumulate(x, y, share=len(pieces), weight=weight, last=i == len(pieces) - 1)
                    for i, ((x, y), weight) in enumerate(zip(pieces, weights)))
        norm = self._optimizer_step()
        value = self._read_step(total, norm)
        self.step += 1
        self.history.train.append(value)
        self.train_seconds += time.perf_counter() - started
        return value

    def _accumulate(self, x: torch.Tensor, y: torch.Tensor, *, share: int, weight: float, last: bool) -> torch.Tensor:
        """Backward of one micro-batch's weighted loss / ``share`` (pieces weighted by their scored targets:
        the mean of means is the batch's mean per scored target)."""
        with no_gradient_sync(self.wrapped, skip=not last):
            loss = self.loss(x, y, weight)
            loss = loss / share if share > 1 else loss
            (loss if self.scaler is None else self.scaler.scale(loss)).backward()
        return loss.detach()

    def _optimizer_step(self) -> torch.Tensor | None:
        """Clip (or measure) the gradients and step; returns their norm, None under loss scaling (whose
        skipped steps, on an infinite norm, are how it finds its scale: no divergence)."""
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients
        if self.config.grad_clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(self.wrapped.parameters(), self.config.grad_clip)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in self.wrapped.parameters() if p.grad is not None])
        if self.scaler is None:
            self.optimizer.step()
            return norm
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return None

    def _read_step(self, loss: torch.Tensor, norm: torch.Tensor | None) -> float:
        """The step's loss over ranks, read with its gradient norm and the ranks' stop request in the one read
        from the device (and the one all-reduce) the loss alone took; DivergedError at a non-finite one."""
        parts = [loss.detach().float().reshape(1)]  # (1,)
        if norm is not None:
            norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP: a DTensor
            parts.append(norm.detach().float().reshape(1).to(loss.device))
        if self.world.size > 1:  # stop together: a rank that stops alone would leave the others in a collective
            parts.append(torch.tensor([float(self.stop.requested)], device=loss.device))
        values = self.world.means(torch.cat(parts))  # (1 to 3,): loss, norm, stop
        self._agreed_stop = self.world.size > 1 and values[-1] > 0
        what = non_finite("loss", values[0]) or (non_finite("gradient norm", values[1]) if norm is not None else None)
        if what is not None:
            raise diverged(self.step + 1, self.config.steps, what, lr=self.config.lr_at(self.step))
        return values[0]

    @torch.no_grad()
    def evaluate(self) -> Evaluation:
        """Mean loss over the same ``eval_batches`` fixed batches of each split, every time."""
        self.model.eval()
        means = {}
        for split in ("train", "val"):
            pieces = [piece for i in range(self.config.eval_batches)
                      for piece in self.micro_batches(split, f"eval-{split}", i)]
            losses = [self.loss(x, y, weight) for (x, y), weight in zip(pieces, self._eval_weights(split, pieces))]
            means[split] = self.world.mean(torch.stack(losses).mean())
        what = non_finite("evaluation's training loss", means["train"]) or non_finite("validation loss", means["val"])
        if what is not None:  # finite steps, then an update that overflowed
            raise diverged(self.step, self.config.steps, what, lr=self.config.lr_at(max(self.step - 1, 0)))
        evaluation = Evaluation(step=self.step, train_loss=means["train"], val_loss=means["val"],
                                val_bpb=validation_bpb(self.data, means["val"]))
        self.history.evals.append(evaluation)
        return evaluation

    def _eval_weights(self, split: str, pieces: list[tuple[torch.Tensor, torch.Tensor]]) -> list[float]:
        """``piece_weights`` of an evaluation; batches that score no target are refused rather than reported as 0."""
        weights = self.piece_weights(pieces)
        if not any(weights):
            raise DataError(Problem(
                message=f"the {self.config.eval_batches} evaluation batches of the {split} split hold no scored "
                        "target (a response token)", hint="raise {eval_batches}, or shorten the prompts",
                names={"eval_batches": "eval_batches"}))
        return weights

    def run(self, *, on_step: Callable[[Trainer, float], None] | None = None,
            on_eval: Callable[[Trainer, Evaluation], None] | None = None) -> History:
        """Train up to ``config.steps``, evaluating every ``eval_every`` steps and at the end.

        ``on_step`` runs after the step's evaluation, so a checkpoint it writes holds it. A ``stop`` request
        (Ctrl-C, agreed by every rank) ends the run after that step's ``on_step``.
        """
        every = self.config.eval_every
        while self.step < self.config.steps and not self.stopping:
            loss = self.train_step()
            if (every and self.step % every == 0) or self.step == self.config.steps:
                evaluation = self.evaluate()
                if on_eval is not None:
                    on_eval(self, evaluation)
            if on_step is not None:
                on_step(self, loss)
        return self.history

    def check_weights(self) -> None:
        """Before a save: DivergedError if the weights hold NaN or Inf (under FSDP on any rank: every rank calls)."""
        name = first_non_finite(self.raw.named_parameters())
        bad = name is not None
        if self.sharded:  # each rank sees its shard only: agree, or one rank would save alone
            bad = self.world.means(torch.tensor([float(bad)], device=self.world.device))[0] > 0
        if bad:
            what = f"the weights are not finite ({name or 'on another process'})"
            raise diverged(self.step, self.config.steps, what, lr=self.config.lr_at(max(self.step - 1, 0)))

    def checkpoint(self) -> Checkpoint:
        """A snapshot to save. Under FSDP this gathers the shards: every rank must call it."""
        training = {"step": self.step, "config": attrs.asdict(self.config), "history": self.history.to_dict(),
                    "train_seconds": self.train_seconds}
        return Checkpoint(spec=self.spec, tokenizer=self.data.tokenizer,
                          model_state=model_state(self.raw, sharded=self.sharded),
                          optimizer_state=optimizer_state(self.raw, self.optimizer, sharded=self.sharded),
                          rng_state=torch.get_rng_state(), training=training)
