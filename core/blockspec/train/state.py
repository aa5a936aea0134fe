"""Model and optimizer state in and out of live modules, whether plain, DDP-wrapped or FSDP2-sharded.

Checkpoints name optimizer state by parameter name, not by index, so the same file
serves a plain optimizer and FSDP2's name-keyed full state dicts.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from blockspec.errors import CheckpointError
from blockspec.checkpoint.weights import check_dtypes, dtype_kind, dtype_misfit, fill, tied_aliases

STEP = "step"  # AdamW's one scalar entry per parameter; its others (the moments) have the parameter's shape


def model_state(model: nn.Module, *, sharded: bool) -> dict[str, torch.Tensor]:
    """The full state dict without tied aliases, on the CPU. Sharded: a collective; every rank calls."""
    aliases = tied_aliases(model)
    if sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    else:
        state = model.state_dict()
    return {name: tensor.detach().cpu() for name, tensor in state.items() if name not in aliases}


def load_model_state(model: nn.Module, tensors: dict[str, torch.Tensor], *, source: str = "checkpoint") -> None:
    """Copy ``tensors`` into a plain (unwrapped) model; a missing or surplus tensor is a CheckpointError."""
    expected = set(model.state_dict()) - tied_aliases(model).keys()
    missing, surplus = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
    if missing or surplus:
        raise CheckpointError(f"{source}: does not fit the model: missing {missing[:5]}, unexpected {surplus[:5]}")
    targets = model.state_dict()
    for name, tensor in tensors.items():
        if targets[name].shape != tensor.shape:
            raise CheckpointError(f"{source}: tensor {name}: expected shape {tuple(targets[name].shape)}, "
                                  f"found {tuple(tensor.shape)}")
    check_dtypes({name: targets[name].dtype for name in tensors}, {n: t.dtype for n, t in tensors.items()}, source)
    fill(model, tensors.items(), source=source)


def check_optimizer_state(model: nn.Module, state: dict[str, Any], *, source: str) -> None:
    """Every tensor of a name-keyed AdamW state fits its parameter, in one CheckpointError: a moment has the
    parameter's shape and kind of dtype, a step is one finite count. Loading casts and broadcasts silently,
    and a misfit fails only mid-step."""
    parameters = dict(model.named_parameters())
    lines = [f"{source}: tensor 'state/{name}/{key}': {problem}"
             for name, entries in state["state"].items() if name in parameters  # others: load_optimizer_state
             for key, value in entries.items()
             if (problem := _misfit(parameters[name], key, value)) is not None]
    if lines:
        raise CheckpointError("\n".join(lines))


def _misfit(parameter: torch.Tensor, key: str, value: Any) -> str | None:
    """What is wrong with one optimizer state entry of ``parameter``, or None."""
    if key == STEP:
        return _step_misfit(value)
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(parameter.shape):
        found = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        return f"expected shape {list(parameter.shape)} (the parameter's), found {found}"
    return dtype_misfit(parameter.dtype, value.dtype)


def _step_misfit(value: Any) -> str | None:
    expected = "expected a step count (one finite number >= 0), found"
    step = value if isinstance(value, torch.Tensor) else torch.tensor(value)
    if step.numel() != 1:
        return f"{expected} shape {list(step.shape)}"
    if dtype_kind(step.dtype) not in ("floating", "integer"):
        return f"{expected} {_name(step.dtype)}"
    number = step.item()
    return None if math.isfinite(number) and number >= 0 else f"{expected} {number}"


def check_rng_state(state: torch.Tensor | None, *, source: str) -> torch.Tensor | None:
    """``state`` if it is a CPU generator's state (uint8, the generator's size): torch refuses anything else
    only when a resumed run sets it, mid-start."""
    if state is None:
        return None
    expected = torch.get_rng_state()
    if state.dtype != expected.dtype or tuple(state.shape) != tuple(expected.shape):
        raise CheckpointError(f"{source}: tensor 'rng/cpu': expected the CPU generator's state, {_name(expected.dtype)} "
                              f"of shape {list(expected.shape)}, found {_name(state.dtype)} of shape {list(state.shape)}")
    return state


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, *, sharded: bool) -> dict[str, Any]:
    """The optimizer's full state keyed by parameter name. Sharded: a collective; every rank calls."""
    if sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_optimizer_state_dict(model, optimizer, options=options)
    names = _flat_names(model, optimizer)
    state = optimizer.state_dict()
    return {
        "state": {names[index]: entries for index, entries in state["state"].items()},
        "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]],
    }


def load_optimizer_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any], *, sharded: bool
) -> None:
    """Load a name-keyed full optimizer state into ``optimizer`` (built on ``model``'s parameters)."""
    if sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))
        return
    index = {name: i for i, name in enumerate(_flat_names(model, optimizer))}
    unknown = sorted(set(state["state"]) - set(index))
    if unknown:
        raise CheckpointError(f"optimizer state names parameters this model lacks: {unknown[:5]}")
    groups = _regrouped(optimizer, state["param_groups"], index)
    optimizer.load_state_dict({
        "state": {index[name]: entries for name, entries in state["state"].items()},
        "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in groups],
    })


def _flat_names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """Parameter names in the optimizer's own order (group by group), which its state dict numbers."""
    names = {id(p): name for name, p in model.named_parameters()}
    return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]


def _regrouped(optimizer: torch.optim.Optimizer, groups: list[dict[str, Any]],
               index: dict[str, int]) -> list[dict[str, Any]]:
    """Saved groups as they are when they name the same parameters; else (a checkpoint from before weight decay
    was split into matrices and the rest) the live groups' settings, which come from the same TrainConfig."""
    names = list(index)
    live, start = [], 0
    for group in optimizer.param_groups:
        live.append(names[start : start + len(group["params"])])
        start += len(group["params"])
    if [sorted(g["params"]) for g in groups] == [sorted(g) for g in live]:
        return groups
    return [{**{k: v for k, v in g.items() if k != "params"}, "params": p} for g, p in zip(optimizer.param_groups, live)]
