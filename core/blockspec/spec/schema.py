"""The spec schema: frozen attrs classes, one per TOML table.

Data flows one way: TOML text -> dict -> ModelSpec (convert.py) -> model (assemble.py).
"""

from __future__ import annotations

from typing import Any, Literal

from attrs import field, frozen

from blockspec.errors import FieldError
from blockspec.spec.validators import in_range, positive

NormPlacement = Literal["pre", "post"]
MAX_LAYERS = 1024  # far above any published model; bounds the cost of checking a hostile spec


@frozen(kw_only=True)
class ModelConfig:
    """The [model] table: sizes and wiring shared by every component."""

    name: str = "model"
    vocab_size: int = field(validator=positive)
    context_length: int = field(validator=positive)
    d_model: int = field(validator=positive)
    n_layers: int = field(validator=in_range(0, MAX_LAYERS, high_open=False))
    n_heads: int = field(validator=positive)
    n_kv_heads: int | None = field(default=None, validator=positive)
    d_ff: int = field(validator=positive)
    bias: bool = True
    norm_placement: NormPlacement = "pre"
    final_norm: bool | None = None
    dropout: float = field(default=0.0, validator=in_range(0.0, 1.0))

    def __attrs_post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise FieldError(
                "n_heads", f"expected a divisor of d_model={self.d_model}, found {self.n_heads}"
            )
        if self.n_heads % self.kv_heads:
            raise FieldError(
                "n_kv_heads", f"expected a divisor of n_heads={self.n_heads}, found {self.kv_heads}"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def has_final_norm(self) -> bool:
        """Pre-LN stacks end with a norm (GPT-2); Post-LN ones already end normalised."""
        return self.norm_placement == "pre" if self.final_norm is None else self.final_norm


@frozen(kw_only=True)
class ComponentSpec:
    """One component table: which provider (``use``) and its validated config."""

    kind: str
    name: str
    distribution: str | None = None  # set when the spec pins "distribution:name"
    config: Any

    @property
    def use(self) -> str:
        return f"{self.distribution}:{self.name}" if self.distribution else self.name


@frozen(kw_only=True)
class ModelSpec:
    """A whole validated spec. ``source`` is where it came from, for messages only."""

    model: ModelConfig
    positional: ComponentSpec
    norm: ComponentSpec
    activation: ComponentSpec
    head: ComponentSpec
    attention: ComponentSpec
    source: str | None = field(default=None, eq=False)

    def components(self) -> tuple[ComponentSpec, ...]:
        return (self.positional, self.norm, self.activation, self.head, self.attention)


def estimate_parameters(model: ModelConfig) -> int:
    """The chapter's closed form: 12·L·d² (blocks) + |V|·d (embedding)."""
    return 12 * model.n_layers * model.d_model**2 + model.vocab_size * model.d_model
