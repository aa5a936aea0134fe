"""Which Hugging Face family a spec can be exported as, and why not when it cannot."""

from __future__ import annotations

from types import ModuleType

from blockspec.errors import CheckpointError
from blockspec.spec.schema import ModelSpec
from blockspec.interop import gpt2, llama

FAMILIES: dict[str, ModuleType] = {"gpt2": gpt2, "llama": llama}


def _common(spec: ModelSpec) -> list[str]:
    m = spec.model
    problems = []
    if spec.head.name != "lm":
        problems.append(f"head is {spec.head.name!r}, expected 'lm'")
    if spec.attention.name != "causal":
        problems.append(f"attention is {spec.attention.name!r}, expected 'causal'")
    if m.norm_placement != "pre" or not m.has_final_norm:
        problems.append("expected pre-norm blocks with a final norm")
    return problems


def _gpt2_misfits(spec: ModelSpec) -> list[str]:
    m, norm = spec.model, spec.norm
    problems = _common(spec)
    if spec.positional.name != "learned":
        problems.append(f"positional is {spec.positional.name!r}, expected 'learned'")
    affine = getattr(norm.config, "elementwise_affine", False) and getattr(norm.config, "bias", False)
    if norm.name != "layernorm" or not affine:
        problems.append("expected norm 'layernorm' with weight and bias")
    if spec.activation.name not in ("gelu", "relu", "silu"):
        problems.append(f"activation is {spec.activation.name!r}, expected gelu, relu or silu")
    if not m.bias or m.kv_heads != m.n_heads:
        problems.append("expected bias = true and no grouped kv heads")
    return problems


def _llama_misfits(spec: ModelSpec) -> list[str]:
    problems = _common(spec)
    if spec.positional.name != "rope":
        problems.append(f"positional is {spec.positional.name!r}, expected 'rope'")
    if spec.norm.name != "rmsnorm":
        problems.append(f"norm is {spec.norm.name!r}, expected 'rmsnorm'")
    if spec.activation.name != "swiglu":
        problems.append(f"activation is {spec.activation.name!r}, expected 'swiglu'")
    return problems


def family_for(spec: ModelSpec) -> str:
    """'gpt2' or 'llama'; CheckpointError saying what keeps the spec from each."""
    misfits = {"gpt2": _gpt2_misfits(spec), "llama": _llama_misfits(spec)}
    for family, problems in misfits.items():
        if not problems:
            return family
    lines = [f"{spec.model.name}: cannot export to the Hugging Face layout:"]
    lines += [f"  as GPT-2: {'; '.join(misfits['gpt2'])}", f"  as Llama: {'; '.join(misfits['llama'])}"]
    raise CheckpointError("\n".join(lines))
