"""One way to watch a forward pass: forward (pre-)hooks on chosen modules and a tap recorder, by module path.

``trace``, ``show`` (shapes) and ``check_finite`` all record per-module values through
``capture``; everything it installs is removed when the block ends, so the model runs
exactly as before outside it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import nn

from blockspec.modules.taps import recording

OutputHook = Callable[[str, nn.Module, tuple, Any], None]  # (path, module, inputs, output)
InputHook = Callable[[str, nn.Module, tuple], None]  # (path, module, inputs)
TapHook = Callable[[str, str, torch.Tensor], None]  # (module path, tap name, tensor)
Where = Callable[[str, nn.Module], bool]  # (path, module) -> hook it?


def everywhere(_path: str, _module: nn.Module) -> bool:
    return True


def module_paths(model: nn.Module) -> dict[int, str]:
    """id(module) -> its dotted path ("" for the model itself)."""
    return {id(module): path for path, module in model.named_modules()}


@contextmanager
def capture(model: nn.Module, *, outputs: OutputHook | None = None, inputs: InputHook | None = None,
            taps: TapHook | None = None, where: Where = everywhere) -> Iterator[dict[int, str]]:
    """Within the block: ``inputs``/``outputs`` see each call of a module ``where`` selects, ``taps`` each tap.

    Yields the id -> path map. Taps from modules outside ``model`` are ignored.
    """
    paths = module_paths(model)
    with ExitStack() as stack:
        for path, module in model.named_modules():
            if where(path, module):
                _hook(stack, path, module, inputs, outputs)
        if taps is not None:
            stack.enter_context(recording(_tap_recorder(paths, taps)))
        yield paths


def _hook(stack: ExitStack, path: str, module: nn.Module, inputs: InputHook | None,
          outputs: OutputHook | None) -> None:
    if inputs is not None:
        stack.callback(module.register_forward_pre_hook(lambda m, args: inputs(path, m, args)).remove)
    if outputs is not None:
        stack.callback(module.register_forward_hook(lambda m, args, out: outputs(path, m, args, out)).remove)


def _tap_recorder(paths: dict[int, str], taps: TapHook) -> Callable[[nn.Module, str, torch.Tensor], None]:
    def record(module: nn.Module, name: str, tensor: torch.Tensor) -> None:
        path = paths.get(id(module))
        if path is not None:
            taps(path, name, tensor)

    return record
