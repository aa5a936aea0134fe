"""The plugin contract: pluggy markers and the hooks a plugin may implement."""

from __future__ import annotations

from typing import Protocol

import pluggy

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
        build: object,
        *,
        summary: str | None = None,
        promises: tuple[str, ...] = (),
    ) -> None: ...


@hookspec
def blockspec_register(register: Register) -> None:
    """Register components by calling ``register(kind, name, config_cls, build)``.

    ``config_cls`` is a frozen attrs class holding the component's own spec
    fields; ``build(config, ctx)`` returns the ``nn.Module``.
    """
