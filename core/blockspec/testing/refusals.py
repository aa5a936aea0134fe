"""A build's refusal is not a failure: the plugin API lets ``build`` raise ValueError or TypeError for sizes it
cannot serve, so the kit counts such a draw as no example (``Refused``), however the check builds it (alone,
or inside a whole model through the assembler). Errors raised by ``forward`` stay failures.

A component that refuses every size, or whose ``serves`` constraint accepts none the kit draws, could not be
checked: never passed. The ``Tally`` of one property's run counts builds, refusals and sizes served, and stops
the run early (``NoneLeft``) once GIVE_UP_AFTER draws have been refused (or not served) before the first one
it could build (or serve).
"""

from __future__ import annotations

from typing import Any

import attrs
from attrs import define, field

from blockspec.assembly.context import BuildContext
from blockspec.registry.components import Component
from blockspec.spec.schema import ModelConfig
from blockspec.testing.cases import constructor
from blockspec.testing.errors import Refused

GIVE_UP_AFTER = 100  # refusals (or sizes not served) before the first build (or size served): (8/9)^100 ≈ 1e-5


class NoneLeft(BaseException):
    """Stops a hypothesis run that can find nothing to check. A BaseException, not an Exception: hypothesis
    lets those through at once (as it does KeyboardInterrupt) instead of shrinking them as failures."""


@define
class Tally:
    """What one property's run saw of the component's sizes: builds, refusals (with their sizes), sizes served."""

    built: int = 0
    refused: list[tuple[ModelConfig, Refused]] = field(factory=list)
    served: int = 0
    declined: int = 0

    def refuse(self, model: ModelConfig, refusal: Refused) -> None:
        self.refused.append((model, refusal))
        if self.built == 0 and len(self.refused) >= GIVE_UP_AFTER:
            raise NoneLeft(self.every_draw_refused())

    def serve(self, accepted: bool, text: str) -> None:
        self.served += accepted
        self.declined += not accepted
        if self.served == 0 and self.declined >= GIVE_UP_AFTER:
            raise NoneLeft(f"none of {self.declined} drawn sizes is one it serves ({text})")

    def every_draw_refused(self) -> str:
        """How often the build refused, and the first refusal with its sizes."""
        model, refusal = self.refused[0]
        return f"the build refused every drawn size ({len(self.refused)} draws), e.g. {constructor(model)}: {refusal}"

    def none_left(self, component: Component) -> str:
        """Why no example was left when some draws were built or served but the check could use none."""
        said = [f"the build refused {len(self.refused)} drawn sizes"] if self.refused else []
        if component.serves is not None:
            said.append(f"only sizes it serves ({component.constraint}) were drawn")
        return f"no drawn example is left to check: {'; '.join(said)}; the check could use none of the rest"


def refusing(component: Component, tally: Tally) -> Component:
    """The same component, whose build raises ``Refused`` where it raised ValueError or TypeError, and whose
    builds and size constraint ``tally`` counts."""
    build, text = component.build, component.constraint

    def build_or_refuse(config: Any, ctx: BuildContext) -> Any:
        try:
            module = build(config, ctx)
        except (ValueError, TypeError) as error:
            refusal = Refused(error)
            tally.refuse(ctx.model, refusal)
            raise refusal from error
        tally.built += 1
        return module

    def counted(model: ModelConfig) -> bool:
        accepted = component.serves_model(model)
        tally.serve(accepted, text)
        return accepted

    counted.__doc__ = text
    return attrs.evolve(component, build=build_or_refuse, serves=None if component.serves is None else counted)
