"""The load-time contract probe: the kit's own ``contract`` property, run once on one fixed small case.

``blockspec doctor``, strict mode (``BLOCKSPEC_STRICT_PLUGINS=1``) and ``load_registry(probe=True)``
build each component at tiny sizes on the CPU and run the same check ``blockspec verify`` runs
with hypothesis, so a component passes or fails its kind's contract the same way in both.
Needs torch (about a second to import), never hypothesis; never run on ``list``.
"""

from __future__ import annotations

from blockspec.registry.components import Component
from blockspec.spec.schema import ModelConfig
from blockspec.testing.cases import Case
from blockspec.testing.errors import NotApplicable, PropertyFailure

PROBE_MODEL = ModelConfig(name="probe", vocab_size=11, context_length=8, d_model=8, n_layers=1, n_heads=2, d_ff=12)
BATCH, TOKENS = 2, 5
CONTRACT = "contract"  # the property every kind has: shapes, dtype, device, flags that match the promises


class ContractError(Exception):
    """A component's module does not keep its kind's contract."""


def probe_case(config: object) -> Case:
    """The one case the probe checks: the sizes above, float32, seed 0, positions from 0."""
    return Case(model=PROBE_MODEL, config=config, batch=BATCH, tokens=TOKENS, seed=0, dtype="float32")


def probe(component: Component) -> str | None:
    """None when the contract holds; a reason when it could not be checked; ContractError when broken.

    A config that needs values, or a build that raises ValueError or TypeError at the probe's sizes
    (the documented way to refuse a config), leaves the component unprobed: no breach. Anything
    else the contract property reports, a crash in build or forward included, is a breach.
    """
    try:
        config = component.config_cls()
    except (TypeError, ValueError) as error:
        return f"its config needs values the probe cannot guess ({_first_line(error)})"
    if not component.serves_model(PROBE_MODEL):
        return f"it does not serve the probe sizes (it serves {component.constraint})"
    from blockspec.testing.harness import build_isolated, one_thread
    from blockspec.testing.properties import find

    case = probe_case(config)
    with one_thread():
        try:
            build_isolated(component, case)
        except (TypeError, ValueError) as error:
            return f"it declined the probe sizes ({_first_line(error)})"
        except AssertionError as error:  # built something that is not an nn.Module
            raise ContractError(str(error)) from None
        try:
            find(CONTRACT, component.kind)(component, case)
        except NotApplicable as error:
            return f"the contract could not be checked at the probe sizes ({_first_line(error)})"
        except PropertyFailure as failure:
            raise ContractError(failure.detail) from None
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
