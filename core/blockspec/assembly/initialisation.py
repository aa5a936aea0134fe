"""The initialisation contract: the spec's [init] draws what each component declares, nothing else.

A module says in ``init_roles`` (a class attribute, or one set on an instance with
``declare_init``) which of its parameters [init] draws and in which role; every other parameter
keeps what the module's own ``__init__`` gave it. A residual output projection is one the module
declares ``"residual"``, whatever it is called. Declarations are data, not a method, so the
build knows what will be drawn before anything is: deferred init skips exactly those tensors.

Roles, for ``[init]``'s std, embedding_std and residual_scaling (GPT-2's: 0.02, 0.02, true):

- ``"std"``: N(0, std²): hidden linear weights, embeddings other than the token embedding;
- ``"residual"``: N(0, (std/√(2·n_layers))²) with residual_scaling, else like "std": a projection
  whose output is added to the residual stream (attention's out, an FFN's down);
- ``"zero"``: zeros: biases;
- ``"token_embedding"``: N(0, embedding_std²): the token embedding (and a head tied to it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal, TypeVar, get_args

import attrs
import torch
from torch import nn

from blockspec.spec.problems import did_you_mean
from blockspec.spec.schema import InitConfig

__all__ = ["INIT_ROLES", "InitPlan", "InitRole", "check_declarations", "declare_init", "declared_parameters",
           "init_plan"]

InitRole = Literal["std", "residual", "zero", "token_embedding"]
INIT_ROLES: tuple[str, ...] = get_args(InitRole)
ATTRIBUTE = "init_roles"  # the class or instance attribute a module declares its roles in
ModuleT = TypeVar("ModuleT", bound=nn.Module)
_MISSING = object()


def declare_init(module: ModuleT, roles: Mapping[str, InitRole]) -> ModuleT:
    """Declare on this instance which of its parameters [init] draws: for a plain ``nn.Linear`` a build returns."""
    setattr(module, ATTRIBUTE, dict(roles))  # a plain dict: the module still deep-copies and pickles
    check_declarations(module)  # a name the module lacks fails here, where the author wrote it
    return module


def check_declarations(module: nn.Module) -> None:
    """Every ``init_roles`` in ``module``'s tree names parameters it has and known roles (TypeError otherwise)."""
    for part in module.modules():
        declared_parameters(part)


def declared_parameters(module: nn.Module) -> list[tuple[nn.Parameter, InitRole]]:
    """Each parameter ``module``'s own ``init_roles`` names, with its role; a name on a None (an absent bias)
    is skipped. TypeError for a role or a name the module does not have."""
    found = []
    for name, role in _declaration(module).items():  # most modules declare nothing: no loop
        if role not in INIT_ROLES:
            raise TypeError(f"{_owner(module)}: {name!r}: unknown role {role!r}, expected one of "
                            f"{', '.join(map(repr, INIT_ROLES))}{_suggestion(role, INIT_ROLES)}")
        parameter = _resolve(module, name)
        if parameter is not None:
            found.append((parameter, role))
    return found


def _declaration(module: nn.Module) -> Mapping[str, str]:
    """The instance's init_roles, else its class's; read past nn.Module.__getattr__, whose misses cost microseconds."""
    found = module.__dict__.get(ATTRIBUTE)
    return found if found is not None else getattr(type(module), ATTRIBUTE, None) or {}


def _resolve(module: nn.Module, name: str) -> nn.Parameter | None:
    """The parameter at the dotted ``name`` below ``module``; None where the path meets a None."""
    owner: object = module
    for part in name.split("."):
        owner = getattr(owner, part, _MISSING) if isinstance(owner, nn.Module) else _MISSING
        if owner is _MISSING:
            raise TypeError(f"{_owner(module)}: {name!r} names no parameter{_parameters_hint(module, name)}")
        if owner is None:
            return None
    if not isinstance(owner, nn.Parameter):
        raise TypeError(f"{_owner(module)}: {name!r} is a {type(owner).__name__}, not a parameter")
    return owner


def _owner(module: nn.Module) -> str:
    return f"{type(module).__name__}.{ATTRIBUTE}"


def _parameters_hint(module: nn.Module, name: str) -> str:
    names = [n for n, _ in module.named_parameters()]
    return _suggestion(name, names) or f"; its parameters: {', '.join(names) or 'none'}"


def _suggestion(word: str, choices: list[str] | tuple[str, ...]) -> str:
    close = did_you_mean(word, choices)
    return f"; {close}" if close else ""


@attrs.frozen
class InitPlan:
    """The parameters [init] draws, each once, in the model's parameter order (so a seed gives the same draws)."""

    roles: tuple[tuple[nn.Parameter, InitRole], ...]

    @property
    def parameters(self) -> list[nn.Parameter]:
        return [parameter for parameter, _ in self.roles]

    def draw(self, init: InitConfig, n_layers: int) -> None:
        """Fill every planned parameter as its role and the spec's [init] say."""
        residual = init.std / math.sqrt(2 * max(n_layers, 1)) if init.residual_scaling else init.std
        stds = {"std": init.std, "residual": residual, "token_embedding": init.token_embedding_std}
        with torch.no_grad():
            for parameter, role in self.roles:
                if role == "zero":
                    nn.init.zeros_(parameter)
                else:
                    nn.init.normal_(parameter, std=stds[role])


def init_plan(model: nn.Module) -> InitPlan:
    """Every module's declarations, read in one pass; where two name one parameter, the outer module's role wins.

    Modules come outer first, as ``model.parameters()`` visits them: when a module's own parameters
    are reached, every declaration that can name them (its own and its ancestors') has been read.
    """
    declared: dict[int, InitRole] = {}
    seen: set[int] = set()
    roles = []
    for module in model.modules():
        for parameter, role in declared_parameters(module):
            declared.setdefault(id(parameter), role)
        for parameter in module._parameters.values():  # parameters(recurse=False) costs 3 generators per module
            if parameter is not None and id(parameter) not in seen:  # a shared one counts where it comes first
                seen.add(id(parameter))
                if id(parameter) in declared:
                    roles.append((parameter, declared[id(parameter)]))
    return InitPlan(tuple(roles))
