"""blockspec: compose PyTorch transformer language models from declarative TOML specs.

Re-exports only. Names that need torch load on first use, so plugins and
``blockspec list`` stay cheap to import.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from blockspec import _moved

from blockspec.registry.specs import load_spec, loads_spec, structure_spec
from blockspec.spec.convert import dump_spec, spec_to_dict
from blockspec.errors import (
    ArgumentTypeError,
    BlockspecError,
    CheckpointError,
    ContextLengthError,
    InputError,
    NonFiniteError,
    PluginError,
    Problem,
    RegistrationError,
    SpecError,
    TokenIdError,
    UnknownComponentError,
)
from blockspec.registry.hookspecs import API_VERSION, hookimpl, hookspec
from blockspec.registry.loading import load_registry, make_plugin_manager
from blockspec.registry.components import Component, Registry
from blockspec.spec.schema import ComponentSpec, ModelConfig, ModelSpec
from blockspec.data.tokenizer import CharTokenizer, TokenizerError
from blockspec.generation.settings import GenerationSettings

_moved.install()

if TYPE_CHECKING:
    from blockspec.assembly.context import BuildContext
    from blockspec.inspect import debug
    from blockspec.assembly.assemble import build
    from blockspec.checkpoint.directory import save
    from blockspec.sources import Source, load, load_tokenizer, open_source
    from blockspec.generation.text import Generation, generate, stream
    from blockspec.evaluate import Perplexity, evaluate_text
    from blockspec.assembly.counting import ParameterCount, count_parameters, estimate_parameters
    from blockspec.modules.kv_cache import KVCache
    from blockspec.modules.transformer import Transformer
    from blockspec.inspect.trace import Stage, Trace, TraceError

_LAZY_MODULES = {"debug": "blockspec.inspect.debug"}  # submodules that import torch
_LAZY = {
    "BuildContext": "blockspec.assembly.context",
    "build": "blockspec.assembly.assemble",
    "load": "blockspec.sources",  # any source with weights: a checkpoint or a Hugging Face directory
    "open_source": "blockspec.sources",  # any path: its kind, locked spec, tokenizer, carried files, model
    "Source": "blockspec.sources",
    "load_tokenizer": "blockspec.sources",  # the tokenizer that goes with a source (the one rule)
    "generate": "blockspec.generation.text",  # a model or any source + a text or ids -> Generation
    "Generation": "blockspec.generation.text",
    "stream": "blockspec.generation.text",  # generate's new text in whole-character pieces, as it is made
    "evaluate_text": "blockspec.evaluate",  # a model or any source + text files -> Perplexity (bits per byte too)
    "Perplexity": "blockspec.evaluate",
    "save": "blockspec.checkpoint.directory",
    "count_parameters": "blockspec.assembly.counting",
    "estimate_parameters": "blockspec.assembly.counting",
    "ParameterCount": "blockspec.assembly.counting",
    "Transformer": "blockspec.modules.transformer",
    "KVCache": "blockspec.modules.kv_cache",
    "Stage": "blockspec.inspect.trace",
    "Trace": "blockspec.inspect.trace",
    "TraceError": "blockspec.inspect.trace",
}


def __getattr__(name: str):
    if name == "trace":  # the module, which is callable: blockspec.trace(model, ids) -> Trace
        return import_module("blockspec.inspect.trace")
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    if name in _LAZY_MODULES:
        return import_module(_LAZY_MODULES[name])
    raise AttributeError(f"module 'blockspec' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names, the lazy ones included, so a notebook's completion offers ``build`` and ``load``."""
    return sorted(__all__)


__all__ = [
    "API_VERSION",
    "ArgumentTypeError",
    "BlockspecError",
    "BuildContext",
    "CharTokenizer",
    "CheckpointError",
    "Component",
    "ComponentSpec",
    "ContextLengthError",
    "Generation",
    "GenerationSettings",
    "InputError",
    "KVCache",
    "ModelConfig",
    "ModelSpec",
    "NonFiniteError",
    "Perplexity",
    "ParameterCount",
    "PluginError",
    "Problem",
    "RegistrationError",
    "Registry",
    "Source",
    "SpecError",
    "Stage",
    "TokenIdError",
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
    "evaluate_text",
    "generate",
    "hookimpl",
    "hookspec",
    "load",
    "load_registry",
    "load_spec",
    "load_tokenizer",
    "loads_spec",
    "make_plugin_manager",
    "open_source",
    "save",
    "spec_to_dict",
    "stream",
    "structure_spec",
    "trace",
]
