"""A model source opened once: what it is, its spec, and what comes with it.

``open_source(path)`` takes any path a command or a library call is given (a spec file, a
checkpoint, a training checkpoint, a Hugging Face directory) and returns a frozen ``Source``.
Its spec is read as a checkpoint is loaded: a ``[lock]`` table (a checkpoint's, or a spec.toml
copied out of one) is checked against the registry and settles ambiguous names. What costs
more than the spec is read when asked (``tokenizer()``, ``carried()``, ``training()``,
``model()``): a tokenizer may need the optional ``tokenizers`` package and carried files may be
large, and ``show`` or ``check`` need neither. Torch loads only when a model (or a checkpoint's
verified file) is needed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import field, frozen

from blockspec.checkpoint.base_ref import BaseReference, is_adapter_checkpoint, read_base_json
from blockspec.checkpoint.layout import BASE_FILE, TRAINING_FILE
from blockspec.data.tokenizer import CharTokenizer, HFTokenizer, TokenizerError
from blockspec.errors import CheckpointError, InputError, Problem
from blockspec.registry.components import Registry
from blockspec.registry.specs import structure_spec
from blockspec.sources.kind import CHECKPOINT_KINDS, SourceKind, source_kind
from blockspec.sources.tokenizers import tokenizer_of
from blockspec.spec import toml_read
from blockspec.spec.convert import read_spec_text
from blockspec.spec.schema import ModelSpec

if TYPE_CHECKING:
    import torch

    from blockspec.modules.transformer import Transformer

LOCK_TABLE = "lock"


@frozen(kw_only=True)
class Source:
    """One model source: its path, kind and spec; its tokenizer, carried files, training document and model."""

    path: Path
    kind: SourceKind
    spec: ModelSpec
    registry: Registry = field(repr=False, eq=False)

    @property
    def has_weights(self) -> bool:
        return self.kind != "spec"

    def tokenizer(self) -> CharTokenizer | HFTokenizer | None:
        """The tokenizer that goes with this model (``sources.tokenizers``' rule), or None."""
        return tokenizer_of(self.path, self.kind)

    def carried(self) -> dict[str, bytes]:
        """The Hugging Face files the model keeps, by their own name ("config.json", "tokenizer.json")."""
        if self.kind in CHECKPOINT_KINDS:
            from blockspec.checkpoint.directory import read_carried

            return read_carried(self.path)
        if self.kind == "hf":
            from blockspec.interop.hf_layout import carried_files

            return carried_files(self.path)
        return {}

    def base(self) -> BaseReference | None:
        """An adapter checkpoint's base (where it is, what it holds; not yet checked against it); None otherwise."""
        if self.kind not in CHECKPOINT_KINDS:
            return None
        from blockspec.checkpoint.directory import read_checkpoint_manifest, read_extra_file

        if not is_adapter_checkpoint(read_checkpoint_manifest(self.path)):
            return None
        return read_base_json(read_extra_file(self.path, BASE_FILE), self.path)

    def training(self) -> dict[str, Any] | None:
        """A training checkpoint's training.json (step, settings, history), verified; None for other kinds.

        ``train.checkpointing`` checks its fields when a run resumes from it."""
        if self.kind != "training-checkpoint":
            return None
        from blockspec.checkpoint.directory import read_extra_file

        try:
            return json.loads(read_extra_file(self.path, TRAINING_FILE))
        except ValueError as error:
            raise CheckpointError(f"{self.path}: {TRAINING_FILE}: not valid JSON: {error}") from None

    def model(self, *, seed: int | None = None, dtype: torch.dtype | None = None,
              device: torch.device | str | None = None, allow_pickle: bool = False) -> Transformer:
        """The model with its weights (a checkpoint's, verified; a Hugging Face directory's, imported), or, for
        a spec file, built with random weights from ``seed``; a spec file without a seed is refused.

        Training mode, like every model blockspec makes; ``.eval()`` to infer. A Hugging Face directory's
        pickled weights are read only with ``allow_pickle``."""
        if self.kind == "spec":
            return self._built(seed, dtype, device)
        if self.kind in CHECKPOINT_KINDS:
            from blockspec.checkpoint.directory import load as load_checkpoint

            return load_checkpoint(self.path, registry=self.registry, dtype=dtype, device=device)
        from blockspec.interop import import_hf

        model = import_hf(self.path, registry=self.registry, allow_pickle=allow_pickle, dtype=dtype)
        return model.to(device) if device is not None else model

    def _built(self, seed: int | None, dtype, device) -> Transformer:
        if seed is None:
            _refuse_weightless(self.path)
        from blockspec.assembly.assemble import build

        return build(self.spec, registry=self.registry, seed=seed, dtype=dtype, device=device)


def open_source(path: str | Path, registry: Registry | None = None, *, with_weights: bool = False) -> Source:
    """Whatever is at ``path``, with its spec read (and locked); CheckpointError or SpecError if it cannot be.

    ``with_weights``: only a source that holds weights will do (a spec file, or nothing at ``path``, is refused
    before anything is read)."""
    path = given_path(path)
    registry = registry if registry is not None else _default_registry()
    kind = source_kind(path)
    if with_weights and kind == "spec":
        _refuse_weightless(path)
    return Source(path=path, kind=kind, spec=_spec(path, kind, registry), registry=registry)


def given_path(path: object, parameter: str = "path") -> Path:
    """``path`` as a Path; anything but a str or a path-like is an InputError naming its type."""
    if isinstance(path, (str, os.PathLike)):
        return Path(path)
    raise InputError(Problem(path=parameter, expected="a path (str or Path)", found=type(path).__name__))


def _refuse_weightless(path: Path) -> None:
    if not path.exists():
        raise CheckpointError(Problem(file=str(path), message="no such checkpoint directory (nor a Hugging Face "
                                                              "directory)"))
    raise CheckpointError(Problem(file=str(path), message="a spec file holds no weights; give a checkpoint or a "
                                  "Hugging Face directory (build a model from a spec with blockspec.build(path, "
                                  "seed=0))"))


def _spec(path: Path, kind: SourceKind, registry: Registry) -> ModelSpec:
    if kind in CHECKPOINT_KINDS:
        from blockspec.checkpoint.directory import load_spec_of

        return load_spec_of(path, registry)
    if kind == "hf":
        from blockspec.interop import spec_from_hf

        return spec_from_hf(path, registry)[0]
    return _read_spec_file(path, registry)


def _read_spec_file(path: Path, registry: Registry) -> ModelSpec:
    text = read_spec_text(path)
    document = toml_read.parse(text, str(path))
    if LOCK_TABLE not in document:
        return structure_spec(document, registry, file=str(path), text=text)
    from blockspec.checkpoint.directory import locked_spec  # torch: only for a spec.toml with a lock

    return locked_spec(document, registry, file=str(path), text=text)


def _default_registry() -> Registry:
    from blockspec.registry.loading import load_registry

    return load_registry()


# ---------------------------------------------------------------- the library's calls that take a path


def load_spec_or_checkpoint(path: str | Path, registry: Registry | None = None) -> ModelSpec:
    """The spec of any model source (``open_source(path).spec``)."""
    return open_source(path, registry).spec


def load_model(path: str | Path, registry: Registry | None = None, *, seed: int = 0, allow_pickle: bool = False,
               dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> Transformer:
    """A model with its weights, or freshly built from a spec file with ``seed`` (``Source.model``)."""
    return open_source(path, registry).model(seed=seed, allow_pickle=allow_pickle, dtype=dtype, device=device)


def load(path: str | Path, *, registry: Registry | None = None, dtype: torch.dtype | None = None,
         device: torch.device | str | None = None, allow_pickle: bool = False) -> Transformer:
    """``blockspec.load``: a model with its weights from a checkpoint or a Hugging Face directory.

    A checkpoint is verified; a Hugging Face directory is imported (``allow_pickle`` lets it read a
    ``.bin``). A spec file holds no weights: a CheckpointError pointing at ``blockspec.build``.
    The model comes back in training mode, like one ``build`` returns, and keeps its source's
    Hugging Face files (``model.carried``), which ``save`` and ``export_hf`` write back.
    """
    source = open_source(path, registry, with_weights=True)
    return source.model(dtype=dtype, device=device, allow_pickle=allow_pickle)


def load_tokenizer(path: str | Path, registry: Registry | None = None) -> CharTokenizer | HFTokenizer:
    """``blockspec.load_tokenizer``: the tokenizer that goes with a model source (``Source.tokenizer``, the one
    rule); a source that carries none is a TokenizerError naming it."""
    source = open_source(path, registry)
    tokenizer = source.tokenizer()
    if tokenizer is None:
        what = "a spec file" if source.kind == "spec" else "this model source"
        raise TokenizerError(Problem(file=str(source.path), message=f"{what} carries no tokenizer",
                                     hint="a checkpoint of blockspec train, or a Hugging Face directory with "
                                          "tokenizer.json, carries one"))
    return tokenizer
