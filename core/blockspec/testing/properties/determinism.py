"""``eval_is_deterministic``: in eval mode a component computes a function, whatever ``[model] dropout`` is.

Inference, evaluation and the KV cache all assume that ``model.eval()`` switches every random part off:
dropout, LayerDrop, a router's jitter noise. A module that applies dropout with ``training=True`` hard-coded,
or reads a flag of its own instead of ``self.training``, trains well and then gives a different answer on
every call. The ``deterministic`` property builds under a drawn dropout that is often 0; this one always
builds with dropout above 0 and calls the same module twice.
"""

from __future__ import annotations

import attrs
import torch

from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.harness import exercise, outputs
from blockspec.testing.properties.base import Property, assert_close

EVAL_DROPOUTS = (0.1, 0.5)  # [model] dropout for this check: never 0, so a dropout left on in eval shows
EVAL_SHARE = 0.2  # dropout is above 0 in every example: 5 examples (100 at --thorough) see a random part left on


def _with_dropout(component: Component):
    from hypothesis import strategies as st

    from blockspec.testing.strategies import cases

    return st.tuples(cases(component), st.sampled_from(EVAL_DROPOUTS)).map(
        lambda drawn: attrs.evolve(drawn[0], model=attrs.evolve(drawn[0].model, dropout=drawn[1])))


def check_eval_is_deterministic(component: Component, case: Case, device: str) -> None:
    """Built with [model] dropout above 0 (a block's or FFN's ``ctx.layer.dropout`` too), in eval mode: two
    calls on the same inputs, each from its own random state, give the same bits."""
    built, tensors, _ = exercise(component, case, device)  # exercise builds in eval mode
    first, second = (_seeded(component, built.module, case, tensors, device, case.seed + k) for k in (1, 2))
    for name, tensor in first.items():
        if tensor is not None:
            assert_close(second[name], tensor, f"{name} of a second call in eval mode (dropout "
                         f"{case.model.dropout:g})", atol=0, rtol=0)


def _seeded(component: Component, module: torch.nn.Module, case: Case, tensors, device: str, seed: int) -> dict:
    """The outputs of one call with torch's generators seeded: a random part shows the same way when replayed."""
    accelerator = torch.device(device).type == "cuda"
    with torch.random.fork_rng(devices=[torch.device(device)] if accelerator else []):
        torch.manual_seed(seed) if accelerator else torch.random.default_generator.manual_seed(seed)
        return outputs(component.kind, module, case, tensors)


DETERMINISM = (
    Property(name="eval_is_deterministic", check=check_eval_is_deterministic, cases=_with_dropout, share=EVAL_SHARE,
             summary="eval mode, [model] dropout > 0: two calls on the same inputs give the same outputs"),
)
