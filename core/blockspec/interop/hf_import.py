"""Hugging Face directory -> blockspec Transformer, with every weight accounted for."""

from __future__ import annotations

from pathlib import Path

import torch

from blockspec.registry.specs import structure_spec
from blockspec.errors import CheckpointError, SpecError
from blockspec.modules.transformer import Transformer
from blockspec.registry.components import Registry
from blockspec.spec.schema import ModelSpec
from blockspec.checkpoint.weights import (build_on_meta, check_dtypes, check_layer_count, check_shapes,
                                         common_float_dtype, fill, unique_state)
from blockspec.interop import hf_config
from blockspec.interop.family import Family
from blockspec.interop.hf_dir import WeightSource, open_weights, read_config
from blockspec.interop.hf_layout import CONFIG, carried_files
from blockspec.interop.weight_map import Rule, hf_shapes, origin, to_blockspec


def import_hf(
    directory: str | Path,
    *,
    registry: Registry | None = None,
    allow_pickle: bool = False,
    dtype: torch.dtype | None = None,
) -> Transformer:
    """Read a local Hugging Face model directory (any family in ``interop.families.FAMILIES``) as a blockspec model.

    The spec comes from config.json; the weights from model.safetensors (a pickle only with
    ``allow_pickle``, then through ``torch.load(weights_only=True)``); the directory's config and
    tokenizer files come along as ``model.carried``. Returned in training mode.
    """
    from blockspec.assembly.assemble import build_unfilled
    from blockspec.registry.loading import load_registry

    directory = Path(directory)
    registry = registry if registry is not None else load_registry()
    spec, family = spec_from_hf(directory, registry)
    with open_weights(directory, allow_pickle=allow_pickle) as source:
        names = _normalized_names(source, family, spec, directory)
        check_layer_count(names, family.layer_index, spec.model.n_layers, str(directory), str(directory / CONFIG))
        rules = family.rules(spec)  # O(n_layers): only once the file has shown it holds that many
        meta_state = unique_state(build_on_meta(spec, registry, str(directory / CONFIG)))
        _check(rules, meta_state, source, names, str(directory))
        model = build_unfilled(spec, registry=registry, dtype=common_float_dtype(list(source.dtypes.values())))
        _fill(model, rules, lambda name: source.read(names[name]), str(directory))
    model.carried = carried_files(directory)
    model = model.to(dtype=dtype) if dtype is not None else model
    return model  # training mode, like every model blockspec builds or loads


def spec_from_hf(directory: Path, registry: Registry) -> tuple[ModelSpec, Family]:
    """The spec a Hugging Face directory's config.json describes, and its weight-map family."""
    config = read_config(directory)
    file = str(directory / CONFIG)
    family = hf_config.family_of(config, file)
    document = hf_config.spec_dict(config, file=file, name=directory.resolve().name or "imported")
    try:
        return structure_spec(document, registry, file=file), family
    except SpecError as error:
        raise CheckpointError(f"{file}: describes an invalid blockspec model:\n{error}") from None


def _normalized_names(source: WeightSource, family: Family, spec: ModelSpec, directory: Path) -> dict[str, str]:
    """Canonical Hugging Face name -> the name in the file, dropping what transformers ignores too."""
    names: dict[str, str] = {}
    for name in source.shapes:
        canonical = family.normalize_name(name)
        if family.ignored(canonical, spec):
            continue
        if canonical in names:
            raise CheckpointError(f"{directory}: tensor {name!r}: stored twice (also as {names[canonical]!r})")
        names[canonical] = name
    return names


def _check(rules: list[Rule], meta_state, source: WeightSource, names: dict[str, str], file: str) -> None:
    uncovered = sorted(set(meta_state) - {rule.target for rule in rules})
    if uncovered:
        raise CheckpointError(f"{file}: no Hugging Face weight maps to {', '.join(uncovered)}; "
                              "the spec's components differ from what this importer knows")
    feeds = origin(rules)
    found = {canonical: source.shapes[stored] for canonical, stored in names.items()}
    check_shapes(hf_shapes(rules, meta_state), found, file, lambda name: f" (-> {feeds[name]})")
    # each source tensor on its own: concatenating an integer q with float k and v would promote it to float
    dtypes = {canonical: source.dtypes[stored] for canonical, stored in names.items()}
    check_dtypes({name: meta_state[feeds[name]].dtype for name in names if name in feeds}, dtypes, file,
                 lambda name: f" (-> {feeds[name]})")


def _fill(model: Transformer, rules: list[Rule], read, file: str) -> None:
    """One rule at a time: each converted tensor is freed once copied."""
    fill(model, ((rule.target, to_blockspec([rule], read)[rule.target]) for rule in rules), source=file)
