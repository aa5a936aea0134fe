"""Parameter counts: exact from the meta device (no memory), and the chapter's estimate."""

from __future__ import annotations

from attrs import frozen

from blockspec.registry.components import Registry
from blockspec.spec.schema import ModelSpec, estimate_parameters

__all__ = ["ParameterCount", "count_parameters", "estimate_parameters"]


@frozen(kw_only=True)
class ParameterCount:
    exact: int  # unique parameters: a tied head is counted once
    estimate: int  # 12 L d^2 + |V| d


def count_parameters(spec: ModelSpec, registry: Registry | None = None) -> ParameterCount:
    """Build on the meta device and count: a 70B spec costs no memory."""
    from blockspec.assembly.assemble import build  # torch loads here, not when the CLI starts

    model = build(spec, registry=registry, device="meta")
    exact = sum(p.numel() for p in model.parameters())
    return ParameterCount(exact=exact, estimate=estimate_parameters(spec.model))
