"""The Hugging Face families blockspec imports and exports: one module each, listed in FAMILIES.

Adding a family is adding its module (see ``interop.family.Family``) and its ``FAMILY`` here.
The order matters twice: an export takes the first family that fits the spec, and a config
whose architecture is unsupported is told the supported ones in this order.
"""

from __future__ import annotations

from blockspec.errors import CheckpointError
from blockspec.spec.schema import ModelSpec
from blockspec.interop.family import Family
from blockspec.interop.families import (deepseek_v3, falcon, gemma, gemma2, gemma3, gpt2, gpt_neox, gpt_oss, llama,
                                        mistral, mixtral, olmo, olmo2, phi, phi3, qwen2, qwen3, qwen3_moe, smollm3,
                                        starcoder2)

FAMILIES: tuple[Family, ...] = (
    gpt2.FAMILY, llama.FAMILY, mistral.FAMILY, qwen2.FAMILY, qwen3.FAMILY, starcoder2.FAMILY, gemma.FAMILY,
    gemma2.FAMILY, olmo2.FAMILY, gpt_neox.FAMILY, phi.FAMILY, phi3.FAMILY, mixtral.FAMILY,
    smollm3.FAMILY, gemma3.FAMILY, gpt_oss.FAMILY, qwen3_moe.FAMILY, olmo.FAMILY, falcon.FAMILY, deepseek_v3.FAMILY,
)


def family_named(name: str) -> Family:
    """The family called ``name`` ('gpt2', 'llama'); KeyError if there is none."""
    for family in FAMILIES:
        if family.name == name:
            return family
    raise KeyError(name)


def family_of_architecture(architecture: str) -> Family | None:
    """The family that imports the Hugging Face class ``architecture``, if any."""
    return next((family for family in FAMILIES if architecture in family.architectures), None)


def family_for(spec: ModelSpec, prefer: str | None = None) -> Family:
    """The family the spec is exported as: the one of architecture ``prefer`` (an imported model's
    original) if it fits, else the first that fits; CheckpointError saying what keeps it from each."""
    preferred = family_of_architecture(prefer) if prefer else None
    if preferred is not None and not preferred.misfits(spec):
        return preferred
    misfits = [(family, family.misfits(spec)) for family in FAMILIES]
    for family, problems in misfits:
        if not problems:
            return family
    lines = [f"{spec.model.name}: cannot export to the Hugging Face layout:"]
    lines += [f"  as {family.title}: {'; '.join(problems)}" for family, problems in misfits]
    raise CheckpointError("\n".join(lines))
