"""A model's LoRA or DoRA adapters in Hugging Face PEFT's layout, for the base ``export_hf`` writes.

PEFT loads ``adapter_config.json`` (a ``LoraConfig``) and ``adapter_model.safetensors`` onto a transformers
model with ``PeftModel.from_pretrained(base, DIR)``. Its tensors are named by the Hugging Face module they
adapt, without the adapter's name: ``base_model.model.<module>.lora_A.weight`` (r, in), ``.lora_B.weight``
(out, r) and, for DoRA, ``.lora_magnitude_vector`` (out,).

The module names come from the family's weight rules (``interop.weight_map``), the ones ``export_hf``
writes the base with, so the two cannot disagree. Where blockspec fuses what Hugging Face keeps apart
(Llama's q|k|v, a gated MLP's gate|up), the update B·A splits exactly: every part keeps A, and B and the
magnitude are split by output rows as the weight is (``weight_map.output_rows``), which also carries
GPT-NeoX's regrouping and an interleaved RoPE's row order. GPT-2's Conv1D stores its weight transposed:
A and B stay (r, in) and (out, r), and the config says ``fan_in_fan_out``.

What one ``LoraConfig`` cannot say is refused, naming the module: LoRA beside DoRA, dropout rates that
differ, an adapter other than blockspec-adapters' ``lora`` and ``dora``, a layer the family stores other
than as whole output rows. Ranks and alphas that differ go in ``rank_pattern`` and ``alpha_pattern``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import torch
from attrs import evolve, frozen

from blockspec.checkpoint.atomic import atomic_directory
from blockspec.checkpoint.safetensors_file import write_file
from blockspec.errors import InputError, Problem
from blockspec.interop.hf_export import export_family, hf_rows
from blockspec.interop.hf_layout import ADAPTER_CONFIG, ADAPTER_WEIGHTS, PEFT_EXPORT
from blockspec.interop.weight_map import Rule, output_rows
from blockspec.modules.adapter import Adapter
from blockspec.modules.transformer import Transformer
from blockspec.outputs.targets import check_writable_target
from blockspec.spec.schema import ModelSpec

PREFIX = "base_model.model."  # PeftModel wraps a LoraModel wrapping the transformers model
DISTRIBUTION = "blockspec-adapters"
USE_DORA = {"lora": False, "dora": True}  # the adapters PEFT's LoRA computes alike, by name


@frozen(kw_only=True)
class PeftModule:
    """One Hugging Face module's part of the export: its name, LoRA options and tensors (PEFT's names below it)."""

    name: str  # "transformer.h.0.attn.c_attn"
    source: str  # the blockspec module path it comes from, for messages
    rank: int
    alpha: float
    dropout: float
    dora: bool
    transposed: bool  # a Conv1D (fan_in_fan_out)
    tensors: dict[str, torch.Tensor]  # "lora_A.weight", "lora_B.weight", "lora_magnitude_vector"


def export_peft(model: Transformer, directory: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``adapter_config.json`` and ``adapter_model.safetensors`` for ``model``'s adapters, atomically.

    An existing PEFT export at ``directory`` is replaced only with ``overwrite``; anything else there is
    refused (``hf_layout.PEFT_EXPORT``)."""
    modules = peft_modules(model)
    target = Path(directory)
    check_writable_target(target, kind=PEFT_EXPORT, overwrite=overwrite)
    tensors = {f"{PREFIX}{m.name}.{key}": t for m in modules for key, t in m.tensors.items()}
    text = json.dumps(adapter_config(modules), indent=2, sort_keys=True) + "\n"
    with atomic_directory(target, overwrite=overwrite) as staging:
        (staging / ADAPTER_CONFIG).write_text(text, encoding="utf-8")
        write_file(tensors, staging / ADAPTER_WEIGHTS, metadata={"format": "pt"})
    return target


def peft_modules(model: Transformer) -> list[PeftModule]:
    """Every adapted Hugging Face module of ``model``'s export, in model order; InputError for what PEFT lacks."""
    if not getattr(model, "adapted", None):
        raise InputError(Problem(path="model", expected="a model with adapters (its spec's [[adapters]])",
                                 found="none", hint="export the plain model with export_hf"))
    base = evolve(_spec(model), adapters=())
    family = export_family(model, base)
    rules = {rule.target: rule for rule in family.rules(base)}
    found: list[PeftModule] = []
    for path in model.adapted:
        found += _parts(model, path, rules.get(f"{path}.weight"), family.title)
    _check_shared(model, found)
    return found


@frozen(kw_only=True)
class _Lora:
    """What PEFT's LoRA reads off one adapter: A (r, in), B (out, r), DoRA's magnitude (out,), the options."""

    a: torch.Tensor
    b: torch.Tensor
    magnitude: torch.Tensor | None
    rank: int
    alpha: float
    dropout: float


def _parts(model: Transformer, path: str, rule: Rule | None, family: str) -> list[PeftModule]:
    """The Hugging Face modules the adapter at ``path`` becomes: one, or one per part of a fused layer."""
    lora = _lora_like(model, path)
    if rule is None:
        raise _refused(model, f"the {family} export has no weight of its own for {path}")
    by_rows = {"lora_B.weight": lora.b, **({"lora_magnitude_vector": lora.magnitude} if lora.magnitude is not None
                                           else {})}
    try:
        split = {key: output_rows(rule, hf_rows(model, {f"{path}.weight": rows})[f"{path}.weight"])
                 for key, rows in by_rows.items()}
    except ValueError as error:
        raise _refused(model, f"the {family} export stores {path} apart: {error}") from None
    return [_module(lora, path, source.removesuffix(".weight"), rule.transpose,
                    {key: parts[i] for key, parts in split.items()}) for i, source in enumerate(rule.sources)]


def _module(lora: _Lora, path: str, name: str, transposed: bool, rows: dict[str, torch.Tensor]) -> PeftModule:
    tensors = {"lora_A.weight": lora.a, **rows}  # A (r, in) is every part's
    return PeftModule(name=name, source=path, rank=lora.rank, alpha=lora.alpha, dropout=lora.dropout,
                      dora=lora.magnitude is not None, transposed=transposed,
                      tensors={key: t.clone(memory_format=torch.contiguous_format) for key, t in tensors.items()})


def _lora_like(model: Transformer, path: str) -> _Lora:
    """The adapter at ``path`` if PEFT's LoRA computes it: blockspec-adapters' lora or dora, scaled alpha / rank."""
    component, adapter = model.adapted[path], model.get_submodule(path)
    if component.name not in USE_DORA or component.distribution != DISTRIBUTION or not isinstance(adapter, Adapter):
        raise _refused(model, f"{path} is wrapped by {component.qualified_name}, which PEFT's LoRA does not "
                                    f"compute", f"PEFT's layout holds {DISTRIBUTION}'s lora and dora")
    rank, alpha, scaling = (getattr(adapter, name, None) for name in ("rank", "alpha", "scaling"))
    if not isinstance(rank, int) or not isinstance(alpha, (int, float)) or not isinstance(scaling, float) \
            or not math.isclose(scaling, alpha / rank):
        raise _refused(model, f"{path}: its update is not scaled by alpha / rank, as PEFT's LoRA scales it")
    magnitude = adapter.get_parameter("lora_magnitude_vector").detach() if USE_DORA[component.name] else None
    return _Lora(a=adapter.get_parameter("lora_A.weight").detach(), b=adapter.get_parameter("lora_B.weight").detach(),
                 magnitude=magnitude, rank=rank, alpha=float(alpha),
                 dropout=float(getattr(adapter.get_submodule("lora_dropout"), "p", 0.0)))


def _check_shared(model: Transformer, modules: list[PeftModule]) -> None:
    """What one LoraConfig holds for every module (use_dora, lora_dropout) must agree across them."""
    first = modules[0]
    for module in modules[1:]:
        if module.dora != first.dora:
            raise _refused(model, f"{module.source} has {'dora' if module.dora else 'lora'} and "
                                                 f"{first.source} {'dora' if first.dora else 'lora'}: PEFT's "
                                                 "use_dora holds for every module of one adapter")
        if module.dropout != first.dropout:
            raise _refused(model, f"{module.source} has dropout {module.dropout:g} and {first.source} "
                                                 f"{first.dropout:g}: PEFT's lora_dropout is one rate for every "
                                                 "module of one adapter")


def adapter_config(modules: list[PeftModule]) -> dict[str, object]:
    """PEFT's LoraConfig as adapter_config.json: the commonest rank and alpha, the others by module."""
    rank = Counter(m.rank for m in modules).most_common(1)[0][0]
    alpha = Counter(m.alpha for m in modules).most_common(1)[0][0]
    return {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": None, "inference_mode": True,
        "target_modules": sorted(m.name for m in modules), "r": rank, "lora_alpha": alpha,
        "rank_pattern": {m.name: m.rank for m in modules if m.rank != rank},
        "alpha_pattern": {m.name: m.alpha for m in modules if m.alpha != alpha},
        "lora_dropout": modules[0].dropout, "use_dora": modules[0].dora, "use_rslora": False, "bias": "none",
        "fan_in_fan_out": any(m.transposed for m in modules), "init_lora_weights": True, "modules_to_save": None,
    }


def _spec(model: Transformer) -> ModelSpec:
    if model.spec is None:
        raise InputError(Problem(path="model", expected="a model with a spec (blockspec.build, blockspec.load)",
                                 found="none"))
    return model.spec


def _refused(model: Transformer, message: str, hint: str | None = None) -> InputError:
    return InputError(Problem(file=_spec(model).source, path="$.adapters", message=message, hint=hint))


__all__ = ["PeftModule", "adapter_config", "export_peft", "peft_modules"]
