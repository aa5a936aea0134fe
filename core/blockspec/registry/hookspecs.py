"""The plugin contract: pluggy markers and the hooks a plugin may implement."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import pluggy

if TYPE_CHECKING:
    from torch import nn

    from blockspec.assembly.context import BuildContext
    from blockspec.spec.schema import ModelConfig

Config: TypeAlias = Any
"""An instance of the component's own ``config_cls``: a frozen attrs class, one field per spec key."""

Build: TypeAlias = Callable[[Config, "BuildContext"], "nn.Module"]
"""``build(config, ctx)``: a component's config instance and the build context -> its module.

Raise ValueError or TypeError for a config or sizes the component cannot build; any other
exception is a bug in the component.
"""

PROJECT = "blockspec"
API_VERSION = 1  # plugins may declare BLOCKSPEC_API = 1 in their module

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class Register(Protocol):
    """The callback a plugin receives; each call is checked as it arrives."""

    def __call__(
        self,
        kind: str,
        name: str,
        config_cls: type,
        build: Build,
        *,
        summary: str | None = None,
        promises: tuple[str, ...] = (),
        serves: Callable[[ModelConfig], bool] | None = None,
    ) -> None: ...


@hookspec
def blockspec_register(register: Register) -> None:
    """Register components by calling ``register(kind, name, config_cls, build)``.

    ``config_cls`` is a frozen attrs class holding the component's own spec
    fields; ``build(config, ctx)`` returns the ``nn.Module``. ``serves``, optional: a callable
    ``(ModelConfig) -> bool`` saying which [model] sizes the build serves (its docstring's first line
    says it in words); the conformance kit draws only those, and a spec with others is refused.
    """
