"""What the runner says of an example that failed once and passed when hypothesis replayed it.

A property is a function of the case: the same case giving two verdicts means the component is not, so the
example is run twice more (two builds from the case's seed, the same inputs) and the first output that
differs is shown: where, the two values and the max |difference|.
"""

from __future__ import annotations

import torch

from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.harness import exercise


def nondeterministic(component: Component, case: Case, first: str, device: str = "cpu") -> str:
    """The failure detail: what the first run found, and how two more runs of the same example differ."""
    said = f"nondeterministic: the same example failed, then passed when replayed (first run: {first})"
    try:
        differing = difference(component, case, device)
    except Exception as error:  # noqa: BLE001 - the detail of a failure already reported, not a second verdict
        return f"{said}; running it again raised {type(error).__name__}: {error}"
    if differing is None:
        return f"{said}; two more runs of it give equal outputs: what differs is state kept between calls"
    return f"{said}; two runs of it differ: {differing}"


def difference(component: Component, case: Case, device: str = "cpu") -> str | None:
    """Two runs of the example (a fresh build each, same seed, same inputs): the first output that differs."""
    _, _, once = exercise(component, case, device)
    _, _, again = exercise(component, case, device)
    for name, first in once.items():
        text = _differ(name, first, again[name])
        if text is not None:
            return text
    return None


def _differ(name: str, first: object, second: object) -> str | None:
    if not (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)):
        return None if first == second else f"{name} {first!r} then {second!r}"
    if first.shape != second.shape:
        return f"{name} shaped {tuple(first.shape)} then {tuple(second.shape)}"
    a, b = first.double(), second.double()
    same = (a == b) | (a.isnan() & b.isnan())  # equal infinities and NaN where both are NaN do not differ
    diff = (a - b).abs().nan_to_num(nan=float("inf")).masked_fill(same, 0.0)
    if diff.numel() == 0 or not bool((diff > 0).any()):
        return None
    where = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    return (f"{name} max |difference| {diff.max().item():.3g} at {where}: "
            f"{first[where].item():.6g} then {second[where].item():.6g}")
