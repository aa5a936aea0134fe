"""The block and ffn kinds: every layout builds, runs, traces its stages and decodes with a cache;
specs and checkpoints from before [block] and [ffn] load with the same names and outputs."""

from __future__ import annotations

import json
import re
import warnings


import pytest
import torch

import blockspec
from blockspec.checkpoint.directory import load, save
from blockspec.errors import SpecError
from blockspec.inspect.trace import trace
from blockspec.interop.families import gpt2, llama
from blockspec.generation.tokens import generate
from tests.conftest import SPECS

SMALL = """
[model]
vocab_size = 61
context_length = 32
d_model = 32
n_layers = 2
n_heads = 4
d_ff = 48
{model_extra}

[positional]
use = "rope"

[norm]
use = "rmsnorm"

[activation]
use = "swiglu"

[head]
use = "lm"
{tables}
"""

LAYOUTS = {
    "pre": ("norm1", "attn", "attn_residual", "norm2", "ffn", "ffn_residual"),
    "post": ("attn", "attn_residual", "norm1", "ffn", "ffn_residual", "norm2"),
    "parallel": ("norm1", "attn", "norm2", "ffn", "residual"),
    "parallel_shared": ("norm1", "attn", "ffn", "residual"),
    "sandwich": ("norm1", "attn", "post_attn_norm", "attn_residual", "norm2", "ffn", "post_ffn_norm",
                 "ffn_residual"),
    "output_norm": ("attn", "norm1", "attn_residual", "ffn", "norm2", "ffn_residual"),
}


def block_table(layout: str) -> str:
    if layout == "parallel_shared":
        return '[block]\nuse = "parallel"\nshared_norm = true'
    return f'[block]\nuse = "{layout}"'


def small(registry, tables: str = "", model_extra: str = "") -> blockspec.ModelSpec:
    return blockspec.loads_spec(SMALL.format(tables=tables, model_extra=model_extra), registry)


def stage_order(names: list[str], prefix: str) -> list[str]:
    """The block's own stages (not its sublayers' inner ones), in order."""
    pattern = re.compile(rf"^{re.escape(prefix)}\.([a-z_0-9]+)$")
    return [m.group(1) for m in map(pattern.match, names) if m]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_layout_builds_runs_traces_and_decodes_with_a_cache(registry, layout):
    spec = small(registry, block_table(layout))
    model = blockspec.build(spec, registry=registry, seed=0).eval()
    ids = torch.randint(61, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(ids)
    assert logits.shape == (2, 7, 61) and torch.isfinite(logits).all()
    result = trace(model, ids)
    own = [s for s in stage_order(result.names(), "blocks.0") if s not in ("attn", "ffn")]
    assert own == [s for s in LAYOUTS[layout] if s not in ("attn", "ffn")]
    assert any(n.startswith("blocks.0.attn.") for n in result.names())  # the sublayers' own stages
    assert any(n.startswith("blocks.0.ffn.") for n in result.names())
    assert torch.equal(result.output, logits)
    prompt = ids[:, :4]
    cached = generate(model, prompt, max_new_tokens=6, temperature=0.0, use_cache=True)
    uncached = generate(model, prompt, max_new_tokens=6, temperature=0.0, use_cache=False)
    assert torch.equal(cached, uncached)
    assert model.provenance["blocks.0"].kind == "block"
    assert model.provenance["blocks.1.ffn"].qualified_name == "blockspec:dense"
    assert model.provenance["blocks.1.ffn.act"].name == "swiglu"


def test_sandwich_has_four_norms_and_parallel_shared_one(registry):
    sandwich = blockspec.build(small(registry, block_table("sandwich")), registry=registry, seed=0)
    assert {"blocks.0.norm1.weight", "blocks.0.post_attn_norm.weight", "blocks.0.norm2.weight",
            "blocks.0.post_ffn_norm.weight"} <= set(sandwich.state_dict())
    shared = blockspec.build(small(registry, block_table("parallel_shared")), registry=registry, seed=0)
    assert not any(".norm2." in name for name in shared.state_dict())


def test_parallel_is_its_formula(registry):
    model = blockspec.build(small(registry, block_table("parallel")), registry=registry, seed=1).eval()
    block, x = model.blocks[0], torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = x + block.attn(block.norm1(x), model.positional, 0) + block.ffn(block.norm2(x))
        assert torch.allclose(block(x, model.positional), expected, atol=1e-6)


@pytest.mark.parametrize("stem", ["gpt2-small", "llama-style", "post-ln-2017", "tiny-shakespeare"])
def test_norm_placement_specs_keep_their_names_and_read_as_the_default_block(registry, stem):
    spec = blockspec.load_spec(SPECS / f"{stem}.toml", registry)
    assert spec.block.use == f"blockspec:{spec.model.norm_placement}"
    assert spec.ffn.use == "blockspec:dense"
    text = blockspec.dump_spec(spec)
    assert "[block]" not in text and "[ffn]" not in text  # defaults are not written: old text round-trips
    assert blockspec.loads_spec(text, registry) == spec


def test_a_norm_placement_spec_builds_what_its_block_table_builds(registry):
    """[model] norm_placement = "post" and [block] use = "post": the same names, the same outputs."""
    placed = small(registry, model_extra='norm_placement = "post"')
    blocked = small(registry, '[block]\nuse = "post"')
    assert blocked.model.norm_placement == "post" and not blocked.model.has_final_norm
    a, b = (blockspec.build(s, registry=registry, seed=4).eval() for s in (placed, blocked))
    assert list(a.state_dict()) == list(b.state_dict())
    names = list(a.state_dict())
    assert {"blocks.0.norm1.weight", "blocks.0.norm2.weight", "blocks.0.attn.qkv.weight", "blocks.0.ffn.up.weight",
            "blocks.0.ffn.down.weight"} <= set(names)
    ids = torch.arange(10).view(1, 10)
    with torch.no_grad():
        assert torch.equal(a(ids), b(ids))


def test_block_and_norm_placement_that_disagree_are_refused_naming_both(registry):
    with pytest.raises(SpecError, match=r"\$\.block\.use: block 'pre' disagrees with \[model\] norm_placement = 'post'"):
        small(registry, '[block]\nuse = "pre"', model_extra='norm_placement = "post"')


@pytest.mark.parametrize(("written", "found"), [("[]", "list []"), ("{}", "dict {}"), ("3", "int 3")])
def test_a_norm_placement_that_is_not_a_string_is_refused_at_its_key(registry, written, found):
    """A list or table is unhashable: it once escaped the block lookup as a TypeError (found by the spec fuzz)."""
    expected = f"$.model.norm_placement: expected one of 'pre', 'post', found {found}"
    with pytest.raises(SpecError, match=re.escape(expected)):
        small(registry, model_extra=f"norm_placement = {written}")


def test_a_checkpoint_saved_before_block_and_ffn_loads(registry, tmp_path):
    """spec.toml without [block]/[ffn] and a [lock] without their entries: what older versions wrote."""
    model = blockspec.build(small(registry), registry=registry, seed=5).eval()
    directory = save(model, tmp_path / "ckpt")
    spec_file = directory / "spec.toml"
    text = spec_file.read_text(encoding="utf-8")
    from blockspec.checkpoint.lock import lock_of, lock_toml

    lock = {k: v for k, v in lock_of(model).items() if not k.startswith(("block:", "ffn:"))}
    old = blockspec.dump_spec(model.spec) + "\n" + lock_toml(lock)
    assert "block:" in text  # what this version writes
    assert "[block]" not in old and "block:" not in old and "ffn:" not in old and "[lock." in old
    _rewrite(directory, "spec.toml", old)
    loaded = load(directory, registry=registry)
    ids = torch.arange(9).view(1, 9)
    with torch.no_grad():
        assert torch.equal(loaded(ids), model(ids))
    assert list(loaded.state_dict()) == list(model.state_dict())


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_a_checkpoint_locked_to_blockspec_blocks_pre_or_post_loads_with_the_core_block(registry, tmp_path, placement):
    """Before the core registered them, pre and post were blockspec-blocks': an old [lock] says so."""
    model = blockspec.build(small(registry, model_extra=f'norm_placement = "{placement}"'), registry=registry,
                            seed=5).eval()
    directory = save(model, tmp_path / "ckpt")
    text = (directory / "spec.toml").read_text(encoding="utf-8")
    core = f'[lock."block:{placement}"]\ndistribution = "blockspec"\n'
    assert core in text  # what this version writes
    _rewrite(directory, "spec.toml", text.replace(core, core.replace('"blockspec"', '"blockspec-blocks"')))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the block did not change: no LockMismatchWarning
        loaded = load(directory, registry=registry)
    assert loaded.provenance["blocks.0"].qualified_name == f"blockspec:{placement}"
    ids = torch.arange(9).view(1, 9)
    with torch.no_grad():
        assert torch.equal(loaded(ids), model(ids))


def test_norm_placement_is_an_alias_of_the_block_table(registry):
    """[model] norm_placement names the core's block; the spec holds the block, and the placement agrees."""
    placed = small(registry, model_extra='norm_placement = "post"')
    blocked = small(registry, '[block]\nuse = "blockspec:post"')
    assert placed.block.use == "blockspec:post" and placed == blocked and blocked.model.norm_placement == "post"
    assert "[block]" not in blockspec.dump_spec(blocked)  # written as the alias, as before


def test_a_spec_builds_without_blockspec_blocks_loaded(monkeypatch):
    """The default block is the core's: a policy that leaves the plugin out still builds every plain spec."""
    monkeypatch.setenv("BLOCKSPEC_PLUGINS", "blockspec-positional,blockspec-norms,blockspec-activations,blockspec-heads")
    from blockspec.registry.loading import load_registry

    without = load_registry()
    assert "blockspec-blocks" not in {c.distribution for c in without}
    for stem in ("gpt2-small", "post-ln-2017"):
        spec = blockspec.load_spec(SPECS / f"{stem}.toml", without)
        assert spec.block.use == f"blockspec:{spec.model.norm_placement}"
    model = blockspec.build(small(without, model_extra='norm_placement = "post"'), registry=without, seed=0)
    assert type(model.blocks[0]).__name__ == "PostNormBlock"


def _rewrite(directory, name: str, text: str) -> None:
    """Replace a file and its digest in the manifest, as the older writer would have recorded it."""
    import hashlib

    (directory / name).write_text(text, encoding="utf-8")
    manifest_path = directory / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    data = (directory / name).read_bytes()

    def fix(node):
        if isinstance(node, dict):
            if node.get("path") == name or node.get("name") == name:
                for key in list(node):
                    if key in ("sha256", "digest"):
                        node[key] = hashlib.sha256(data).hexdigest()
                    elif key in ("bytes", "size"):
                        node[key] = len(data)
            for key, value in list(node.items()):
                if key == name and isinstance(value, dict):
                    fix({**value, "path": name}) or value.update({k: v for k, v in _digest(data).items() if k in value})
                else:
                    fix(value)
        elif isinstance(node, list):
            for item in node:
                fix(item)

    fix(manifest)
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")


def _digest(data: bytes) -> dict:
    import hashlib

    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "size": len(data)}


@pytest.mark.parametrize("layout", ["post", "parallel", "sandwich", "output_norm"])
def test_families_refuse_other_blocks(registry, layout):
    spec = small(registry, block_table(layout))
    for family in (gpt2, llama):
        assert any("block is" in p and "expected 'pre'" in p for p in family.FAMILY.misfits(spec))


def test_list_shows_the_block_and_ffn_kinds(capsys):
    from blockspec.cli import main

    assert main(["list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    rows = listed["components"] if isinstance(listed, dict) and "components" in listed else listed
    found = {(r["kind"], r["name"]): r["distribution"] for r in rows}
    for name in ("pre", "post"):
        assert found[("block", name)] == "blockspec"  # the core's, as attention:causal and ffn:dense
    for name in ("parallel", "sandwich", "output_norm"):
        assert found[("block", name)] == "blockspec-blocks"
    assert found[("ffn", "dense")] == "blockspec"
