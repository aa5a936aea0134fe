"""Parameter counts: exact from the meta device (no memory), and the chapter's estimate."""

from __future__ import annotations

import os
from pathlib import Path

from attrs import frozen

from blockspec.errors import SpecError
from blockspec.registry.specs import load_spec

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
    from blockspec.assembly.assemble import build  # torch loads here, not when the CLI starts

    if isinstance(spec, (str, os.PathLike)):
        if Path(spec).is_dir():
            raise SpecError(f"{spec}: a directory; count_parameters reads a spec file or takes a ModelSpec "
                            "(a checkpoint's or Hugging Face directory's: "
                            "blockspec.sources.load_spec_or_checkpoint(path))")
        spec = load_spec(spec, registry)
    elif not isinstance(spec, ModelSpec):
        raise TypeError(f"count_parameters: expected a ModelSpec or the path of a spec file (str or Path), "
                        f"found {type(spec).__name__}")

    model = build(spec, registry=registry, device="meta")
    exact = sum(p.numel() for p in model.parameters())
    return ParameterCount(exact=exact, estimate=estimate_parameters(spec.model))
