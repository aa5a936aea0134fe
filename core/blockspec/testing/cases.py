"""What hypothesis draws for one property check: sizes, a config, a seed and a few knobs."""

from __future__ import annotations

import functools
from typing import Any

import attrs
from attrs import frozen

from blockspec.registry.components import Component, Registry
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
    # What ``ctx.layer`` gives a block or FFN built alone (``harness.StandInLayer``): the layer's index, and the
    # installed components its norms and activation are built from (None: the kit's reference partner).
    layer_index: int = 0
    norm: Component | None = None
    activation: Component | None = None

    def __str__(self) -> str:
        """Every field, the model's and the config's included, as Python that rebuilds this case when pasted."""
        return constructor(self)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, for ``blockspec verify --json``."""
        data = attrs.asdict(self, recurse=False)
        data["model"] = attrs.asdict(self.model)
        data["config"] = repr(self.config)
        data["norm"], data["activation"] = _qualified(self.norm), _qualified(self.activation)
        return data


def _qualified(component: Component | None) -> str:
    return "reference" if component is None else f"{component.kind}:{component.name} ({component.distribution})"


def constructor(value: Any) -> str:
    """An attrs instance as the call that makes it (``Name(field=value, ...)``, each init field under the
    name ``__init__`` takes, recursively); an installed component as the lookup that finds it
    (``installed("norm", "rmsnorm", "blockspec-norms")``, from ``blockspec.testing``); any other value as its
    ``repr``. Fields are read from ``attrs.fields``, so one added later is printed too."""
    if isinstance(value, Component):
        return f"installed({value.kind!r}, {value.name!r}, {value.distribution!r})"
    if not attrs.has(type(value)):
        return repr(value)
    given = ", ".join(f"{f.alias}={constructor(getattr(value, f.name))}" for f in attrs.fields(type(value)) if f.init)
    return f"{type(value).__name__}({given})"


@functools.cache
def installed_registry() -> Registry:
    """The installed components, loaded once per process (``blockspec.load_registry()``, the one way the kit
    finds them), never probed: the probe itself builds stand-in layers, which read it."""
    from blockspec.registry.loading import load_registry

    return load_registry(strict=False, probe=False)


def installed(kind: str, name: str, distribution: str) -> Component:
    """The installed component a printed case names, so a falsifying example pastes back as Python."""
    found = installed_registry().get(kind, name, distribution)
    if found is None:
        raise LookupError(f"no installed {kind} {name!r} from {distribution!r}: pip install {distribution}")
    return found
