"""Old import paths from before the subpackages, kept working with a DeprecationWarning.

``import blockspec.validators`` still works and warns once, naming where the module lives now;
so do submodules of a moved package (``blockspec.explore.page``), which resolve to the one
module at the new place, never a second copy. ``blockspec.spec`` is not here: the package
took the old module's name, and resolves the old module's names itself (``spec/__init__.py``);
so does ``blockspec.sources`` (it was ``interop/sources.py``; its names are the package's).
New code imports from ``blockspec.plugin`` (plugin authors) or the subpackages.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings
from importlib import import_module
from importlib.machinery import ModuleSpec
from types import ModuleType

MOVED = {
    "strict": "spec.strict", "problems": "spec.problems",
    "validators": "spec.validators", "toml_guard": "spec.toml_read", "toml_text": "spec.toml_write",
    "convert": "registry.specs", "kinds": "spec.kinds", "json_file": "spec.json_read",
    "hookspecs": "registry.hookspecs", "plugins": "registry.loading",
    "catalogue": "registry.catalogue", "policy": "registry.policy", "probe": "testing.probe",
    "assemble": "assembly.assemble", "counting": "assembly.counting", "deferred_init": "assembly.deferred_init",
    "context": "assembly.context", "builtin": "assembly.builtin",
    "manifest": "checkpoint.manifest", "lock": "checkpoint.lock",
    "safetensors_file": "checkpoint.safetensors_file", "verified_weights": "checkpoint.verified_weights",
    "weights": "checkpoint.weights", "weights_file": "checkpoint.weights_file", "atomic": "checkpoint.atomic",
    "background_digest": "checkpoint.digest",
    "trace_plots": "inspect.plots", "summary": "inspect.summary", "debug": "inspect.debug",
    "explore": "inspect.explore", "explore.page": "inspect.explore.page", "explore.export": "inspect.explore.export",
    "tokenizer": "data.tokenizer", "interop.sources": "sources",
    "train.tokenizer": "data.tokenizer", "train.textfiles": "data.textfiles", "train.prepared": "data.prepared",
    "train.data": "data.dataset", "checkpoint.outputs": "outputs",
    "train.generate": "generation.tokens", "train.generate_text": "generation.text",
    "train.generation_bounds": "generation.bounds",
}
PREFIX = "blockspec."
# ``blockspec.generate`` was a module (now ``blockspec.generation.tokens``) and is now the top-level function: an
# alias for the old module would replace the function on ``blockspec`` the moment anything imported it.
# Public names that are modules elsewhere: ``blockspec.trace`` is the callable trace module, so
# ``from blockspec.trace import trace, Trace`` is a path users write; it resolves without a warning.
ALIASES = {"trace": "inspect.trace"}


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds only the old names; every other import passes through untouched."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> ModuleSpec | None:
        if not fullname.startswith(PREFIX):
            return None
        old = fullname.removeprefix(PREFIX)
        if old in ALIASES:
            return importlib.util.spec_from_loader(fullname, _AliasLoader(PREFIX + ALIASES[old], warn=False))
        new = new_name(old)
        return None if new is None else importlib.util.spec_from_loader(fullname, _AliasLoader(PREFIX + new))


def new_name(old: str) -> str | None:
    """Where an old module name lives now: itself moved, or inside a moved package; None if it did not move."""
    parts = old.split(".")
    for cut in range(len(parts), 0, -1):
        head = ".".join(parts[:cut])
        if head in MOVED:
            return ".".join([MOVED[head], *parts[cut:]])
    return None


class _AliasLoader(importlib.abc.Loader):
    """Hands out the module at its new place, under the old name too."""

    def __init__(self, new_name: str, *, warn: bool = True) -> None:
        self.new_name = new_name
        self.warn = warn

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        if self.warn:
            warnings.warn(f"{spec.name} moved to {self.new_name}; import it from there",
                          DeprecationWarning, stacklevel=2)
        module = import_module(self.new_name)
        self.real_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.real_spec  # the import machinery stamped the old name on it


def install() -> None:
    """Add the finder once, first: after the path finder, a moved package's submodule would load twice.

    Cheap (a prefix test and a dict look-up per import), and imports nothing.
    """
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
