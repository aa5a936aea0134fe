"""Opt-in runtime checks: find the first module whose forward pass produced NaN or Inf.

``with check_finite(model): model(ids)`` installs forward hooks on every submodule (through
``inspect.capture``, as ``trace`` and ``show`` do) and wraps the
positional encoder's ``embed``/``rotate``/``score_bias`` (which run outside any module call); all
of it is removed on exit, so a model outside the block runs exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import nn

from blockspec.errors import NonFiniteError
from blockspec.inspect.capture import capture, module_paths

POSITIONAL_METHODS = ("embed", "rotate", "score_bias")


@contextmanager
def check_finite(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block, a forward pass that makes NaN or Inf raises NonFiniteError naming where."""
    watcher = _Watcher(model)
    watcher.install()
    try:
        yield model
    finally:
        watcher.remove()


class _Watcher:
    """Checks every module's inputs and outputs; the first non-finite value is blamed on its producer."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.paths = module_paths(model)
        self.hooks = ExitStack()
        self.wrapped: list[tuple[nn.Module, str, Any]] = []

    def install(self) -> None:
        self.hooks.enter_context(capture(self.model, inputs=self._check_inputs, outputs=self._check_outputs))
        positional = getattr(self.model, "positional", None)
        if isinstance(positional, nn.Module):
            for name in POSITIONAL_METHODS:
                self._wrap(positional, name)

    def remove(self) -> None:
        self.hooks.close()
        for module, name, previous in reversed(self.wrapped):
            if previous is _ABSENT:
                delattr(module, name)
            else:
                setattr(module, name, previous)
        self.wrapped.clear()

    def _wrap(self, module: nn.Module, name: str) -> None:
        method = getattr(module, name, None)
        if not callable(method):
            return
        self.wrapped.append((module, name, module.__dict__.get(name, _ABSENT)))
        path = self.paths[id(module)]

        def checked(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            self._raise_if_bad(result, path, f".{name}()", args)
            return result

        object.__setattr__(module, name, checked)

    def _check_inputs(self, path: str, _module: nn.Module, args: tuple) -> None:
        found = _non_finite(args)
        if found is None:
            return
        parent = path.rpartition(".")[0] if path else None
        culprit = "the model's input" if not path else f"code in {self.describe(parent)} between its submodules"
        raise NonFiniteError(f"{self.describe(path)} received {found} (made by {culprit})",
                             module_path=parent if path else None, spec_path=self.spec_path(parent or ""))

    def _check_outputs(self, path: str, _module: nn.Module, args: tuple, output: Any) -> None:
        self._raise_if_bad(output, path, "", args)

    def _raise_if_bad(self, result: Any, path: str, call: str, args: tuple) -> None:
        found = _non_finite(result)
        if found is not None:
            inputs = "finite inputs" if _non_finite(args) is None else "non-finite inputs"
            raise NonFiniteError(f"{self.describe(path)}{call} produced {found} from {inputs}",
                                 module_path=path or None, spec_path=self.spec_path(path))

    def describe(self, path: str | None) -> str:
        module = self.model.get_submodule(path or "")
        component, owner = self._component(path or "")
        where = f"{path or 'the model'} ({type(module).__name__}"
        if component is not None:
            inside = "" if owner == path else f"inside {owner}, "
            where += f", {inside}{component.kind} {component.qualified_name!r} from {self.spec_path(path or '')}"
        return where + ")"

    def spec_path(self, path: str) -> str | None:
        component, _ = self._component(path)
        if component is not None:
            return f"$.{component.kind}"
        return "$.model" if getattr(self.model, "spec", None) is not None else None

    def _component(self, path: str) -> tuple[Any, str | None]:
        """The registry component that built ``path`` or its nearest ancestor, and that ancestor's path."""
        provenance = getattr(self.model, "provenance", {}) or {}
        parts = path.split(".") if path else []
        for end in range(len(parts), 0, -1):
            owner = ".".join(parts[:end])
            if owner in provenance:
                return provenance[owner], owner
        return None, None


_ABSENT = object()


def _non_finite(value: Any) -> str | None:
    """'NaN in 3 of 96 values' for the first floating tensor holding NaN or Inf, else None."""
    for tensor in _tensors(value):
        if not tensor.is_floating_point() and not tensor.is_complex():
            continue
        bad = ~torch.isfinite(tensor)
        if bad.any():
            kinds = [k for k, test in (("NaN", torch.isnan), ("Inf", torch.isinf)) if test(tensor).any()]
            return f"{' and '.join(kinds)} in {int(bad.sum())} of {tensor.numel()} values"
    return None


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


__all__ = ["NonFiniteError", "check_finite"]
