"""A property: a named check of one promise (or of every component), and the helpers checks share."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Literal

import attrs
import torch
from attrs import field, frozen

from blockspec.registry.components import Component
from blockspec.spec.kinds import PROMISED_FIELDS
from blockspec.testing.cases import DTYPES, Case
from blockspec.testing.errors import NotApplicable, PropertyFailure

Check = Callable[[Component, Case, str], None]
Weights = Literal["drawn", "fresh", "trained"]
LEAK_DTYPES = ("float64",)  # leak checks: float64 rounding (~1e-16) is far below any leak worth naming
LEAK_RTOL = 1e-12  # a leak larger than this fraction of the largest output fails (float64 noise: ~1e-16)


def _default_cases(component: Component):
    from blockspec.testing.strategies import cases  # hypothesis loads here, when a runner asks for cases

    return cases(component)


def sequence_cases(component: Component):
    """Cases with at least two tokens: for checks that change the later ones."""
    from blockspec.testing.strategies import sequences

    return sequences(component)


def _passes_through(error: Exception) -> bool:
    """The kit's own signals, and hypothesis' (rejections, health checks), are not the component's failure.

    Looks hypothesis up in sys.modules rather than importing it: if it is not loaded, none of its
    exceptions can be in flight, and the probe runs properties without it.
    """
    if isinstance(error, (NotApplicable, PropertyFailure)):
        return True
    errors = sys.modules.get("hypothesis.errors")
    return errors is not None and isinstance(error, errors.HypothesisException)


@frozen(kw_only=True)
class Property:
    """``check(component, case, device)`` raises AssertionError when the promise is broken.

    ``kind`` None: every kind. ``promise`` None: every component of the kind.
    ``when`` narrows further, for checks that depend on more than one promise.
    ``weights``: "drawn" checks fresh and perturbed (trained) modules, "fresh" only fresh ones (promises
    about the initialisation), "trained" only perturbed ones (leak checks: weights that make leaks large).
    ``dtypes``: the dtypes drawn for the module and its inputs.
    Calling the property turns any failure into a PropertyFailure that names
    the component, its distribution and the property.
    """

    name: str
    summary: str
    check: Check
    kind: str | None = None
    promise: str | None = None
    when: Callable[[Component], bool] | None = None
    share: float = 1.0  # fraction of max_examples to run: whole-model checks build two models per example
    cases: Callable[[Component], object] = field(default=_default_cases)
    weights: Weights = "drawn"
    dtypes: tuple[str, ...] = DTYPES
    min_examples: int = 3  # the fewest examples ``share`` leaves; 1 for a check that costs a compile per example

    def strategy(self, component: Component):
        """``cases(component)`` with the dtype and the fresh/trained knob this property draws."""
        from hypothesis import strategies as st

        trained = {"drawn": st.booleans(), "fresh": st.just(False), "trained": st.just(True)}[self.weights]
        knobs = st.tuples(self.cases(component), st.sampled_from(self.dtypes), trained)
        drawn = knobs.map(lambda drawn: attrs.evolve(drawn[0], dtype=drawn[1], trained=drawn[2]))
        return drawn if component.serves is None else drawn.filter(lambda case: component.serves_model(case.model))

    def examples(self, max_examples: int) -> int:
        """This property's share of an example budget; never fewer than ``min_examples`` (or the budget, if smaller)."""
        return max(min(self.min_examples, max_examples), round(max_examples * self.share))

    def concerns(self, component: Component) -> bool:
        return self.kind in (None, component.kind)

    def applies(self, component: Component) -> bool:
        declared = self.promise is None or self.promise in component.promises
        return self.concerns(component) and declared and (self.when is None or self.when(component))

    def __call__(self, component: Component, case: Case, device: str = "cpu") -> None:
        try:
            self.check(component, case, device)
        except Exception as error:
            if _passes_through(error):
                raise
            if isinstance(error, AssertionError):
                raise self.failure(component, str(error)) from error
            raise self.failure(component, f"raised {type(error).__name__}: {error}") from error  # a crash too

    def failure(self, component: Component, detail: str) -> PropertyFailure:
        name = f"{component.kind}:{component.name}"
        return PropertyFailure(name, f"{component.distribution} {component.version}", self.name, detail)


def promised_option(component: Component, case: Case, promise: str) -> object:
    """The drawn value of the option ``promise`` is about: the config field it names (``PROMISED_FIELDS``).

    Read only where the component makes the promise, so a field that merely shares the name means nothing
    to the kit (issue 21, bug 7: a norm's unrelated ``offset`` field was failed as Gemma's 1 + w).
    """
    if promise not in component.promises:
        raise LookupError(f"{component.kind}:{component.name} does not promise {promise!r}")
    name = PROMISED_FIELDS[(component.kind, promise)][0]
    return getattr(case.config, name)


def assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str, *,
                 atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """|actual - expected| <= atol + rtol·|expected| everywhere, or an AssertionError saying by how much."""
    if tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(f"{what}: shape {tuple(actual.shape)} where {tuple(expected.shape)} was expected")
    diff = (actual.double() - expected.double()).abs()
    bound = atol + rtol * expected.double().abs()
    if not bool((diff <= bound).all()):
        worst = diff.nan_to_num(nan=float("inf")).max().item()
        raise AssertionError(f"{what}: max |difference| {worst:.3g} exceeds {atol:g} + {rtol:g}·|expected|")


def assert_unchanged(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """For leak checks (float64): equal up to ``LEAK_RTOL`` of the largest expected magnitude, so a leak of
    1e-5 relative size fails however small the outputs are."""
    scale = expected.double().abs().max().item() if expected.numel() else 0.0
    assert_close(actual, expected, what, atol=LEAK_RTOL * max(scale, 1e-30), rtol=0)


def assert_shape(tensor: torch.Tensor, expected: tuple[int, ...], what: str) -> None:
    if tuple(tensor.shape) != tuple(expected):
        raise AssertionError(f"{what}: expected shape {tuple(expected)}, found {tuple(tensor.shape)}")


def assert_like(tensor: torch.Tensor, reference: torch.Tensor, what: str) -> None:
    """Same dtype and device as the input it came from."""
    if tensor.dtype != reference.dtype:
        raise AssertionError(f"{what}: expected dtype {reference.dtype}, found {tensor.dtype}")
    if tensor.device != reference.device:
        raise AssertionError(f"{what}: expected device {reference.device}, found {tensor.device}")
