"""blockspec: compose PyTorch transformer language models from declarative TOML specs.

Re-exports only. Names that need torch load on first use, so plugins and
``blockspec list`` stay cheap to import.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from .context import BuildContext
from .convert import dump_spec, load_spec, loads_spec, spec_to_dict, structure_spec
from .errors import (
    BlockspecError,
    CheckpointError,
    ContextLengthError,
    NonFiniteError,
    PluginError,
    Problem,
    RegistrationError,
    SpecError,
    UnknownComponentError,
)
from .hookspecs import API_VERSION, hookimpl, hookspec
from .plugins import load_registry, make_plugin_manager
from .registry import Component, Registry
from .spec import ComponentSpec, ModelConfig, ModelSpec
from .tokenizer import CharTokenizer, TokenizerError

if TYPE_CHECKING:
    from . import debug
    from .assemble import build
    from .checkpoint import load, save
    from .counting import ParameterCount, count_parameters, estimate_parameters
    from .modules.kv_cache import KVCache
    from .modules.transformer import Transformer
    from .trace import Stage, Trace, TraceError

_LAZY_MODULES = {"debug": ".debug"}  # submodules that import torch
_LAZY = {
    "build": ".assemble",
    "load": ".checkpoint",
    "save": ".checkpoint",
    "count_parameters": ".counting",
    "estimate_parameters": ".counting",
    "ParameterCount": ".counting",
    "Transformer": ".modules.transformer",
    "KVCache": ".modules.kv_cache",
    "Stage": ".trace",
    "Trace": ".trace",
    "TraceError": ".trace",
}


def __getattr__(name: str):
    if name == "trace":  # the module, which is callable: blockspec.trace(model, ids) -> Trace
        return import_module(".trace", __name__)
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    if name in _LAZY_MODULES:
        return import_module(_LAZY_MODULES[name], __name__)
    raise AttributeError(f"module 'blockspec' has no attribute {name!r}")


__all__ = [
    "API_VERSION",
    "BlockspecError",
    "BuildContext",
    "CharTokenizer",
    "CheckpointError",
    "Component",
    "ComponentSpec",
    "ContextLengthError",
    "KVCache",
    "ModelConfig",
    "ModelSpec",
    "NonFiniteError",
    "ParameterCount",
    "PluginError",
    "Problem",
    "RegistrationError",
    "Registry",
    "SpecError",
    "Stage",
    "TokenizerError",
    "Trace",
    "TraceError",
    "Transformer",
    "UnknownComponentError",
    "build",
    "count_parameters",
    "debug",
    "dump_spec",
    "estimate_parameters",
    "hookimpl",
    "hookspec",
    "load",
    "load_registry",
    "load_spec",
    "loads_spec",
    "make_plugin_manager",
    "save",
    "spec_to_dict",
    "structure_spec",
    "trace",
]
