"""The benchmark's three shapes: a spec, the batch, and what the peers need to match it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import blockspec

from benchmarks.reference import Config

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Case:
    """One model and input shape, measured against the hand-written reference and Hugging Face."""

    name: str
    spec_path: Path
    batch: int
    tokens: int
    hf_family: str  # "gpt2" or "llama"
    rounds: int  # timing rounds; fewer for the big model, whose calls are long
    memory_repeats: int = 3  # fresh processes per contender for the RSS peak

    def spec(self, registry: blockspec.Registry) -> blockspec.ModelSpec:
        return blockspec.load_spec(self.spec_path, registry)


CASES = (
    Case("gpt2-small", ROOT / "examples/specs/gpt2-small.toml", 4, 256, "gpt2", rounds=9, memory_repeats=1),
    Case("tiny-shakespeare", ROOT / "examples/specs/tiny-shakespeare.toml", 8, 64, "gpt2", rounds=25),
    Case("llama-small", HERE / "specs/llama-small.toml", 8, 256, "llama", rounds=20),
)
SEVENTY_B = HERE / "specs/llama-2-70b.toml"


def by_name(names: list[str] | None) -> tuple[Case, ...]:
    if not names:
        return CASES
    known = {case.name: case for case in CASES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; choose from {sorted(known)}")
    return tuple(known[n] for n in names)


def reference_config(spec: blockspec.ModelSpec) -> Config:
    """The hand-written model's config for the architecture a spec describes (Pre-LN only)."""
    m = spec.model
    activation = spec.activation.name
    if activation == "gelu":
        activation = "gelu_tanh" if spec.activation.config.approximate == "tanh" else "gelu"
    return Config(
        vocab_size=m.vocab_size, context_length=m.context_length, d_model=m.d_model,
        n_layers=m.n_layers, n_heads=m.n_heads, n_kv_heads=m.kv_heads, d_ff=m.d_ff, bias=m.bias,
        positional=spec.positional.name, norm=spec.norm.name, activation=activation,
        tied=spec.head.config.tied, eps=spec.norm.config.eps,
    )
