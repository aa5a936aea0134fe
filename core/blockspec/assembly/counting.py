"""Parameter counts: exact from the meta device (no memory), and the chapter's estimate."""

from __future__ import annotations

import os

from attrs import frozen

from blockspec.registry.components import Registry
from blockspec.spec.schema import ModelSpec, estimate_parameters

__all__ = ["ParameterCount", "count_parameters", "estimate_parameters"]


@frozen(kw_only=True)
class ParameterCount:
    exact: int  # unique parameters: a tied head is counted once
    estimate: int  # 12 L d^2 + |V| d


def count_parameters(spec: ModelSpec | str | os.PathLike[str], registry: Registry | None = None) -> ParameterCount:
    """Build on the meta device and count: a 70B spec costs no memory.

    ``spec``: a ModelSpec or the path of a spec file. (The spec of a checkpoint or a Hugging Face
    directory: ``blockspec.sources.load_spec_or_checkpoint(path)``.)
    """
    from blockspec.assembly.assemble import build, given_spec  # torch loads here, not when the CLI starts

    spec = given_spec(spec, registry)
    model = build(spec, registry=registry, device="meta")
    exact = sum(p.numel() for p in model.parameters())
    return ParameterCount(exact=exact, estimate=estimate_parameters(spec.model))
