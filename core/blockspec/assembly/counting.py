"""Parameter counts: exact from the meta device (no memory), active per token, and the chapter's estimate.

"Active" is what one token passes through. A module whose parameters a token only partly uses (a
mixture of experts: top_k of n_experts) says so itself with ``active_parameters()``
(``ActiveParameters``, part of ``blockspec.plugin``); every other parameter is active.
"""

from __future__ import annotations

import os
from typing import Any

from attrs import frozen

from blockspec.assembly.active import ActiveParameters
from blockspec.registry.components import Registry
from blockspec.spec.schema import ModelSpec, estimate_parameters

__all__ = ["ActiveParameters", "ParameterCount", "count_model", "count_parameters", "estimate_parameters"]

DENSE_FFN = ("blockspec", "dense")  # the FFN whose 8·d² per layer the estimate's 12·L·d² assumes


@frozen(kw_only=True)
class ParameterCount:
    exact: int  # unique parameters: a tied head is counted once
    estimate: int | None  # 12 L d^2 + |V| d; None for a model whose FFNs are not the dense one it counts
    active: int  # what one token passes through (a MoE's top_k experts of n_experts); exact for a dense model


def count_model(model: Any) -> ParameterCount:
    """Count a built model (on any device, the meta device included)."""
    exact = _unique(model.parameters())
    skipped, inside = 0, ()
    for path, module in model.named_modules():
        if path.startswith(inside) or not isinstance(module, ActiveParameters):
            continue
        own, active = _unique(module.parameters()), module.active_parameters()
        if not 0 <= active <= own:
            raise ValueError(f"{path}: {type(module).__name__}.active_parameters() returned {active}, expected "
                             f"0 to {own} (its own parameters)")
        skipped, inside = skipped + own - active, (*inside, f"{path}.")
    spec = getattr(model, "spec", None)
    return ParameterCount(exact=exact, active=exact - skipped,
                          estimate=estimate_parameters(spec.model) if spec and _dense(model) else None)


def _unique(parameters) -> int:
    return sum(p.numel() for p in {id(p): p for p in parameters}.values())


def _dense(model: Any) -> bool:
    """Every FFN the model built is the core's dense one: what 12·L·d² (4·d² attention + 8·d² FFN) describes."""
    ffns = [c for c in model.provenance.values() if c.kind == "ffn"]
    return all((c.distribution, c.name) == DENSE_FFN for c in ffns)


def count_parameters(spec: ModelSpec | str | os.PathLike[str], registry: Registry | None = None) -> ParameterCount:
    """Build on the meta device and count: a 70B spec costs no memory.

    ``spec``: a ModelSpec or the path of a spec file. (The spec of a checkpoint or a Hugging Face
    directory: ``blockspec.sources.load_spec_or_checkpoint(path)``.)
    """
    from blockspec.assembly.assemble import build, given_spec  # torch loads here, not when the CLI starts

    return count_model(build(given_spec(spec, registry), registry=registry, device="meta"))
