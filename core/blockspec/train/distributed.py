"""One process or many: the process group from torchrun's environment, and DDP or FSDP2 wrapping.

Every rank takes its slice of the same global batch, so N processes train exactly the
model one process would (up to float summation order).
"""

from __future__ import annotations

import os
from typing import Literal

import torch
import torch.distributed as dist
from attrs import frozen
from torch import nn

from blockspec.errors import BlockspecError, Problem

Strategy = Literal["ddp", "fsdp"]


class DistributedError(BlockspecError, RuntimeError):
    """The process layout or device cannot run what was asked."""


@frozen(kw_only=True)
class World:
    """This process's place among ``size`` processes; a single process is rank 0 of 1."""

    rank: int = 0
    size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, batch: torch.Tensor) -> torch.Tensor:
        """This rank's rows of a global batch (B, ...) -> (B / size, ...)."""
        if batch.shape[0] % self.size:
            raise DistributedError(Problem(
                message=f"a batch of {batch.shape[0]} cannot be split evenly over {self.size} processes",
                hint=f"use a {{batch_size}} divisible by {self.size}", names={"batch_size": "batch_size"}))
        rows = batch.shape[0] // self.size
        return batch[self.rank * rows : (self.rank + 1) * rows].to(self.device)

    def mean(self, value: torch.Tensor) -> float:
        """The average of a scalar over all ranks (every rank must call)."""
        return self.means(value.reshape(1))[0]

    def means(self, values: torch.Tensor) -> list[float]:
        """The averages of a vector (n,) over all ranks, in one reduction and one read (every rank must call)."""
        values = values.detach().float()
        if self.size > 1:
            values = values.clone()  # all_reduce works in place
            dist.all_reduce(values, op=dist.ReduceOp.SUM)
        return [value / self.size for value in values.tolist()]


def pick_device(request: str, local_rank: int = 0) -> torch.device:
    """"auto": this rank's GPU when there is one, else the CPU."""
    if request == "auto":
        request = "cuda" if torch.cuda.is_available() else "cpu"
    if request == "cuda":
        if not torch.cuda.is_available():
            raise DistributedError("device 'cuda' asked for, but torch sees no CUDA device; use device 'cpu'")
        return torch.device("cuda", local_rank)
    return torch.device(request)


def init_world(device_request: str = "auto") -> World:
    """Join torchrun's process group when launched by it (WORLD_SIZE > 1); otherwise one process."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    device = pick_device(device_request, int(os.environ.get("LOCAL_RANK", "0")))
    if size == 1:
        return World(device=device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return World(rank=dist.get_rank(), size=dist.get_world_size(), device=device)


def close_world(world: World, *, finished: bool = True) -> None:
    """Leave the process group. After a clean run every rank first waits for the others (rank 0
    may still be writing the checkpoint), so that no rank tears down gloo's connections while a
    peer still uses them; after a failure waiting could hang on a rank that never arrives."""
    if world.size > 1 and dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()


def wrap(model: nn.Module, world: World, strategy: Strategy = "ddp") -> nn.Module:
    """DDP (a full replica per rank) or FSDP2 (parameters sharded, one unit per block, then the root)."""
    if world.size == 1:
        return model
    if strategy == "ddp":
        device_ids = [world.device.index] if world.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    return _fully_shard(model)


def _fully_shard(model: nn.Module) -> nn.Module:
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        raise DistributedError(Problem(
            message="{fsdp} needs torch.distributed.fsdp.fully_shard (FSDP2, torch >= 2.6); "
                    f"this torch is {torch.__version__}", hint="use {ddp}",
            names={"fsdp": "strategy 'fsdp'", "ddp": "strategy 'ddp' (the default)"})) from None
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return model
