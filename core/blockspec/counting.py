"""Parameter counts: exact from the meta device (no memory), and the chapter's estimate."""

from __future__ import annotations

from attrs import frozen

from .registry import Registry
from .spec import ModelConfig, ModelSpec


@frozen(kw_only=True)
class ParameterCount:
    exact: int  # unique parameters: a tied head is counted once
    estimate: int  # 12 L d^2 + |V| d


def estimate_parameters(model: ModelConfig) -> int:
    """The chapter's closed form: 12·L·d² (blocks) + |V|·d (embedding)."""
    return 12 * model.n_layers * model.d_model**2 + model.vocab_size * model.d_model


def count_parameters(spec: ModelSpec, registry: Registry | None = None) -> ParameterCount:
    """Build on the meta device and count: a 70B spec costs no memory."""
    from .assemble import build

    model = build(spec, registry=registry, device="meta")
    exact = sum(p.numel() for p in model.parameters())
    return ParameterCount(exact=exact, estimate=estimate_parameters(spec.model))
