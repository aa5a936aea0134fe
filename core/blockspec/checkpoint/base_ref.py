"""An adapter checkpoint's base: which checkpoint its adapters were trained on, by place and by content.

An adapter checkpoint holds only its adapters' tensors; the weights they adapt stay in the base
checkpoint. ``base.json`` says where that base is (relative to the adapter checkpoint, so the two
move together) and what it held: the sha256 of its spec.toml and model.safetensors, as the base's
own manifest records them. A base replaced by another model is refused on load, never adapted.

Torch-free: reading a reference reads two manifests and a small JSON file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

from attrs import frozen

from blockspec.checkpoint.layout import BASE_FILE, SPEC_FILE, WEIGHTS_FILE
from blockspec.checkpoint.manifest import Manifest, Sha256, read_manifest
from blockspec.errors import CheckpointError, Problem
from blockspec.spec.documents import structure_document
from blockspec.spec.json_read import json_object
from blockspec.spec.validators import Check

FORMAT = "blockspec-adapter-base"
VERSION = 1

FormatName = Annotated[str, Check(lambda text: text == FORMAT, repr(FORMAT))]
FormatVersion = Annotated[int, Check(lambda version: version == VERSION, f"{VERSION} (this blockspec reads version "
                                                                         f"{VERSION})")]
BasePath = Annotated[str, Check(lambda text: bool(text) and "\0" not in text, "a path to the base checkpoint")]


@frozen(kw_only=True)
class BaseReference:
    """A base checkpoint: where it is, and the digests of its spec and weights."""

    path: Path
    spec_sha256: str
    weights_sha256: str

    def same_content(self, other: BaseReference) -> bool:
        return (self.spec_sha256, self.weights_sha256) == (other.spec_sha256, other.weights_sha256)


@frozen(kw_only=True)
class BaseDocument:
    """base.json as written, checked through the strict converter."""

    format: FormatName
    version: FormatVersion
    path: BasePath
    spec_sha256: Sha256
    weights_sha256: Sha256


def base_reference(path: str | Path) -> BaseReference:
    """The reference to the checkpoint at ``path`` as a base: it must hold its own weights (not an adapter's)."""
    manifest = read_manifest(Path(path))
    if WEIGHTS_FILE not in manifest.files:
        hint = "an adapter checkpoint's adapters train over its base: pass that base, or merge it first " \
               "(`blockspec merge`)" if BASE_FILE in manifest.files else None
        raise CheckpointError(Problem(file=str(path), message=f"not a base for adapters: it holds no {WEIGHTS_FILE}",
                                      hint=hint))
    return BaseReference(path=Path(os.path.abspath(path)), spec_sha256=manifest.files[SPEC_FILE].sha256,
                         weights_sha256=manifest.files[WEIGHTS_FILE].sha256)


def base_json(base: BaseReference, target: Path) -> bytes:
    """base.json for an adapter checkpoint written at ``target``: the base's path relative to it."""
    relative = os.path.relpath(base.path, os.path.abspath(target))
    document = {"format": FORMAT, "version": VERSION, "path": Path(relative).as_posix(),
                "spec_sha256": base.spec_sha256, "weights_sha256": base.weights_sha256}
    return (json.dumps(document, indent=1) + "\n").encode("utf-8")


def read_base_json(data: bytes, checkpoint: Path) -> BaseReference:
    """The reference ``checkpoint``'s base.json (already verified against its manifest) holds."""
    file = checkpoint / BASE_FILE
    read = structure_document(json_object(data, file), BaseDocument, file=str(file), error=CheckpointError)
    return BaseReference(path=Path(os.path.abspath(checkpoint / read.path)), spec_sha256=read.spec_sha256,
                         weights_sha256=read.weights_sha256)


def is_adapter_checkpoint(manifest: Manifest) -> bool:
    return BASE_FILE in manifest.files


def check_same_base(expected: BaseReference, found: BaseReference, *, adapters: str | Path) -> None:
    """Refuse adapters onto a base other than the one they were trained on (same content, wherever it is)."""
    if expected.same_content(found):
        return
    what = "weights" if expected.spec_sha256 == found.spec_sha256 else "spec"
    recorded = expected.weights_sha256 if what == "weights" else expected.spec_sha256
    holds = found.weights_sha256 if what == "weights" else found.spec_sha256
    raise CheckpointError(Problem(
        file=str(Path(adapters) / BASE_FILE), path=f"$.{what}_sha256",
        expected=f"the base these adapters were trained on ({what} sha256 {recorded[:12]}...)",
        found=f"{found.path}, whose {what} differ (sha256 {holds[:12]}...)",
        hint="adapters are trained for one base's weights: restore that base at its path, or train adapters for "
             "this one"))


__all__ = ["BaseReference", "base_json", "base_reference", "check_same_base", "is_adapter_checkpoint",
           "read_base_json"]
