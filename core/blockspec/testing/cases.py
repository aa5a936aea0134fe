"""What hypothesis draws for one property check: sizes, a config, a seed and a few knobs."""

from __future__ import annotations

from typing import Any

import attrs
from attrs import frozen

from blockspec.spec.schema import ModelConfig

DTYPES = ("float32", "float64")  # what numeric properties draw: tolerances stay sharp
ALL_DTYPES = ("float32", "float64", "bfloat16", "float16")  # what the ``dtypes`` property checks, each example


@frozen(kw_only=True)
class Case:
    """One example: the model sizes, the component's config, and the inputs' seed and shape.

    ``factor``, ``start`` and ``cut`` are knobs individual properties read: a scale
    factor or shift, the first position, and the position after which inputs change.
    ``trained``: the built module's parameters and persistent buffers are moved by seeded noise
    (``blockspec.testing.harness.perturb``), as training would leave them, instead of fresh.
    """

    model: ModelConfig
    config: Any
    batch: int = 2
    tokens: int = 4
    seed: int = 0
    dtype: str = "float32"
    factor: float = 2.0
    start: int = 0
    cut: int = 0
    trained: bool = False

    def __str__(self) -> str:
        """Every field, the model's and the config's included, as Python that rebuilds this case when pasted."""
        return constructor(self)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, for ``blockspec verify --json``."""
        data = attrs.asdict(self, recurse=False)
        data["model"] = attrs.asdict(self.model)
        data["config"] = repr(self.config)
        return data


def constructor(value: Any) -> str:
    """An attrs instance as the call that makes it (``Name(field=value, ...)``, each init field under the
    name ``__init__`` takes, recursively); any other value as its ``repr``. Fields are read from
    ``attrs.fields``, so one added later is printed too."""
    if not attrs.has(type(value)):
        return repr(value)
    given = ", ".join(f"{f.alias}={constructor(getattr(value, f.name))}" for f in attrs.fields(type(value)) if f.init)
    return f"{type(value).__name__}({given})"
