"""What hypothesis draws for one property check: sizes, a config, a seed and a few knobs."""

from __future__ import annotations

from typing import Any

import attrs
from attrs import frozen

from blockspec.registry.components import Component
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
        m = self.model
        sizes = (f"d_model={m.d_model} n_heads={m.n_heads} n_kv_heads={m.kv_heads} d_ff={m.d_ff} "
                 f"vocab_size={m.vocab_size} context_length={m.context_length} n_layers={m.n_layers} "
                 f"bias={m.bias} norm_placement={m.norm_placement}")
        knobs = (f"batch={self.batch} tokens={self.tokens} seed={self.seed} dtype={self.dtype} "
                 f"factor={self.factor:g} start={self.start} cut={self.cut} trained={self.trained}")
        return f"{sizes} config={self.config!r} {knobs}{self._layer_text()}"

    def _layer_text(self) -> str:
        """The stand-in layer's draw: its index, [model] dropout and partner components."""
        partners = " ".join(f"{kind}={_qualified(part)}" for kind, part in (("norm", self.norm),
                                                                           ("activation", self.activation)))
        return f" layer_index={self.layer_index} dropout={self.model.dropout:g} {partners}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, for ``blockspec verify --json``."""
        data = attrs.asdict(self, recurse=False)
        data["model"] = attrs.asdict(self.model)
        data["config"] = repr(self.config)
        data["norm"], data["activation"] = _qualified(self.norm), _qualified(self.activation)
        return data


def _qualified(component: Component | None) -> str:
    return "reference" if component is None else f"{component.kind}:{component.name} ({component.distribution})"
