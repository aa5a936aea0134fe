"""blockspec.plugin is the whole plugin API: torch-free to import, the only blockspec module plugins use,
and the old import paths keep working (the moved ones with a DeprecationWarning)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
import typing
import warnings
from pathlib import Path

import pytest

import blockspec
import blockspec.plugin
from blockspec._moved import MOVED

from .conftest import ROOT


def run_python(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_importing_the_plugin_api_loads_no_torch():
    result = run_python("""
        import sys
        import blockspec.plugin
        from blockspec.plugin import API_VERSION, Build, BuildContext, Register, hookimpl, positive
        print(sorted(m for m in sys.modules if m == "torch" or m.startswith(("torch.", "hypothesis"))))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_torch_backed_names_load_on_first_use():
    from blockspec.modules.kv_cache import KVCache, LayerCache
    from blockspec.modules.positional import PositionalEncoding

    assert (blockspec.plugin.PositionalEncoding, blockspec.plugin.KVCache) == (PositionalEncoding, KVCache)
    assert blockspec.plugin.LayerCache is LayerCache
    assert set(blockspec.plugin.__all__) <= set(dir(blockspec.plugin))
    for name in blockspec.plugin.__all__:
        assert getattr(blockspec.plugin, name) is not None, name
    with pytest.raises(AttributeError, match="has no attribute 'Transformer'"):
        blockspec.plugin.Transformer  # noqa: B018


def test_the_build_signature_and_the_context_are_typed_precisely():
    from torch import nn

    from blockspec.plugin import Build, BuildContext, Config

    assert typing.get_args(Build) == ([Config, "BuildContext"], "nn.Module")  # names resolved lazily: no torch
    hints = typing.get_type_hints(BuildContext, localns={"nn": nn})
    assert hints["embedding"] is nn.Embedding and hints["model"] is blockspec.plugin.ModelConfig
    with pytest.raises(TypeError):
        BuildContext(model=blockspec.plugin.ModelConfig(vocab_size=2, context_length=2, d_model=2, n_layers=0,
                                                        n_heads=1, d_ff=1))  # the embedding is always given


def blockspec_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
        found |= {n for n in names if n == "blockspec" or n.startswith("blockspec.")}
    return found


@pytest.mark.parametrize("root", ["plugins", "examples/third_party_plugin"])
def test_plugins_import_only_the_plugin_api_and_in_tests_the_kit(root):
    files = sorted((ROOT / root).rglob("*.py"))
    assert files
    for path in files:
        allowed = {"blockspec.plugin", "blockspec.testing"} if "tests" in path.parts else {"blockspec.plugin"}
        assert blockspec_imports(path) <= allowed, path.relative_to(ROOT)


def test_old_import_paths_still_work_and_the_moved_ones_warn():
    result = run_python(f"""
        import importlib, json, warnings
        moved = {sorted(MOVED)!r}
        report = {{}}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from blockspec import BuildContext, hookimpl, hookspec, API_VERSION, ModelConfig
            report["top-level"] = [str(w.message) for w in caught]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from blockspec.spec import ModelSpec  # a module once; the package that took its name warns
            report["old spec module"] = [ModelSpec.__module__, [str(w.message) for w in caught]]
        for old in moved:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                module = importlib.import_module("blockspec." + old)
            report[old] = [module.__name__, [(w.category.__name__, str(w.message)) for w in caught]]
        import blockspec.explore.export, blockspec.inspect.explore.export as new  # a submodule of a moved package
        report["one module"] = blockspec.explore.export is new
        print(json.dumps(report))
    """)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report.pop("top-level") == [] and report.pop("one module") is True
    assert report.pop("old spec module") == [
        "blockspec.spec.schema", ["blockspec.spec.ModelSpec moved to blockspec.spec.schema; import it from there"]]
    for old, new in MOVED.items():
        name, warned = report[old]
        assert name == f"blockspec.{new}", old
        assert ["DeprecationWarning", f"blockspec.{old} moved to blockspec.{new}; import it from there"] in \
            [list(w) for w in warned], (old, warned)


def test_the_top_level_names_plugins_used_before_are_the_plugin_apis():
    from blockspec import BuildContext, hookimpl

    assert BuildContext is blockspec.plugin.BuildContext and hookimpl is blockspec.plugin.hookimpl
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # warns once per process; checked above
        import blockspec.hookspecs as old_hookspecs

    assert old_hookspecs.hookimpl is hookimpl


BUILDING_BLOCKS = {"FeedForward": "blockspec.modules.feed_forward", "CausalSelfAttention": "blockspec.modules.attention",
                   "causal_mask": "blockspec.modules.attention"}


@pytest.mark.parametrize("name", sorted(BUILDING_BLOCKS))
def test_the_core_building_blocks_are_exported_without_loading_torch_until_used(name):
    result = run_python(f"""
        import sys
        import blockspec.plugin
        print("torch" in sys.modules, {name!r} in blockspec.plugin.__all__)
        from blockspec.plugin import {name}
        print("torch" in sys.modules)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "True"]


@pytest.mark.parametrize("name", sorted(BUILDING_BLOCKS))
def test_each_building_block_is_the_object_the_core_uses(name):
    import importlib

    assert getattr(blockspec.plugin, name) is getattr(importlib.import_module(BUILDING_BLOCKS[name]), name)


def test_the_core_builds_its_attention_and_ffn_from_the_exported_classes(registry):
    from .specs import spec_text

    spec = blockspec.loads_spec(spec_text(name="small", vocab_size=32, context_length=8, d_model=16, n_layers=1,
                                          n_heads=2, d_ff=32), registry=registry)
    model = blockspec.build(spec, registry=registry)
    assert type(model.blocks[0].attn) is blockspec.plugin.CausalSelfAttention
    assert type(model.blocks[0].ffn) is blockspec.plugin.FeedForward


def test_the_moe_shared_experts_reuse_the_dense_ffn():
    from blockspec_moe.modules import SharedExperts

    assert issubclass(SharedExperts, blockspec.plugin.FeedForward)



def test_the_trace_module_imports_by_its_public_name_without_a_warning():
    """``blockspec.trace`` is the callable trace module, so ``from blockspec.trace import trace`` is a path users write."""
    result = run_python("""
        import warnings, json
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import blockspec
            from blockspec.trace import Trace, trace
            same = blockspec.trace.trace is trace and blockspec.trace.Trace is Trace
        print(json.dumps({"same": same, "warnings": [str(w.message) for w in caught]}))
    """)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"same": True, "warnings": []}


def test_blockspec_generate_stays_the_function_whatever_imports_the_old_module_path():
    """The old module path is retired: an alias would bind the module over the function on ``blockspec``."""
    result = run_python("""
        import importlib, json
        import blockspec
        try:
            importlib.import_module("blockspec.generate")
            imported = True
        except ModuleNotFoundError:
            imported = False
        print(json.dumps({"imported": imported, "function": blockspec.generate.__module__}))
    """)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"imported": False, "function": "blockspec.generation.text"}
