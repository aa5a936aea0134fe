"""docs/architecture.md stays true where code can check it (issue 21).

Every kind in ``spec/kinds.py``'s KINDS has an entry in each table the page's "Adding a component
kind" names, so a kind added without one of the steps fails here with the number of the step it
skipped. And every file the page names in backticks, or links to, exists, so the page cannot send a
reader to a moved module.
"""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import attrs
import pytest
import torch

import blockspec
from blockspec.checkpoint import layout
from blockspec.errors import SpecError
from blockspec.interop.families import FAMILIES
from blockspec.spec.convert import MODEL_WIDE, spec_to_dict
from blockspec.spec.kinds import KIND_SUMMARIES, KINDS, PROMISE_MEANINGS, PROMISES, SECTIONS, WRAPPER_SECTIONS
from blockspec.spec.schema import LAYER_KINDS, ComponentSpec, LayerSpec, ModelSpec
from blockspec.testing.probe import probe
from blockspec.testing.properties import PROPERTIES
from blockspec.testing.reference import NAME, ReferenceConfig, partner

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "core" / "blockspec"
PAGE = ROOT / "docs" / "architecture.md"
EXAMPLE = ROOT / "examples" / "specs" / "tiny-shakespeare.toml"
RECIPE = "'Adding a component kind' in docs/architecture.md"


def missing(step: int, kind: str, what: str) -> str:
    return f"kind {kind!r} skipped step {step} of {RECIPE}: {what}"


@pytest.fixture(scope="module")
def example(registry) -> ModelSpec:
    return blockspec.load_spec(EXAMPLE, registry)


# ---------------------------------------------------------------- step by step, for every kind


@pytest.mark.parametrize("kind", KINDS)
def test_step_1_the_kind_and_its_promises_are_named(kind):
    assert KIND_SUMMARIES.get(kind), missing(1, kind, "no summary in spec/kinds.py's KIND_SUMMARIES")
    assert kind in PROMISES, missing(1, kind, "no entry in spec/kinds.py's PROMISES")
    unexplained = sorted(p for p in PROMISES[kind] if (kind, p) not in PROMISE_MEANINGS)
    assert not unexplained, missing(1, kind, f"promises {unexplained} have no PROMISE_MEANINGS entry")


@pytest.mark.parametrize("kind", SECTIONS)
def test_step_2_the_spec_has_a_table_of_it(kind, example):
    fields = attrs.fields_dict(ModelSpec)
    assert kind in fields, missing(2, kind, "ModelSpec (spec/schema.py) has no field of its name")
    assert kind in {part.kind for part in example.components()}, missing(
        2, kind, "ModelSpec.components() (spec/schema.py) does not list it: dump and the lock skip its table")
    per_layer = kind in LAYER_KINDS and kind in attrs.fields_dict(LayerSpec)
    assert per_layer or kind in MODEL_WIDE, missing(
        2, kind, "neither per layer (spec/schema.py's LAYER_KINDS and LayerSpec) nor model-wide "
                 "(spec/convert.py's MODEL_WIDE, the reason a [[layers]] entry may not vary it)")


@pytest.mark.parametrize("kind", SECTIONS)
def test_step_3_a_spec_without_its_table_is_refused_or_gets_the_cores_default(kind, registry, example):
    document = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    document.pop(kind, None)
    try:
        spec = blockspec.structure_spec(document, registry)
    except SpecError as error:
        assert f"missing required table [{kind}]" in str(error), missing(3, kind, str(error))
        return
    part = getattr(spec, kind)
    chosen = registry.get(kind, part.name, part.distribution)
    assert chosen is not None and chosen.distribution == "blockspec", missing(
        3, kind, f"its default {part.use!r} in spec/convert.py is not one of the core's own components")
    assert blockspec.structure_spec(spec_to_dict(spec), registry) == spec, missing(
        3, kind, "the spec read without its table does not dump back to itself (spec/convert.py's spec_to_dict)")


@pytest.mark.parametrize("kind", SECTIONS)
def test_step_4_the_assembler_builds_it(kind, registry, example):
    model = blockspec.build(example, registry=registry, seed=0)
    built = {component.kind for component in model.provenance.values()}
    assert kind in built, missing(4, kind, "assembly/assemble.py never builds it (no model.provenance entry)")
    with torch.no_grad():
        assert model(torch.zeros(1, 2, dtype=torch.long)).shape[:2] == (1, 2)


@pytest.mark.parametrize("kind", SECTIONS)
def test_step_5_the_kit_has_a_reference_partner_the_harness_can_run(kind):
    try:
        reference = partner(kind)
    except KeyError:
        pytest.fail(missing(5, kind, "testing/reference.py has no partner for it"))
    assert probe(reference) is None, missing(
        5, kind, "the harness (testing/harness.py) cannot run its contract on the reference partner")


@pytest.mark.parametrize("kind", KINDS)
def test_step_6_the_kit_has_its_properties_with_a_contract(kind):
    assert (PACKAGE / "testing" / "properties" / f"{kind}.py").is_file(), missing(
        6, kind, f"no testing/properties/{kind}.py")
    names = {p.name for p in PROPERTIES if p.kind == kind}
    assert "contract" in names, missing(
        6, kind, "no 'contract' property in testing/properties/__init__.py's PROPERTIES (the probe runs it)")


@pytest.mark.parametrize("kind", KINDS)
def test_step_7_the_conformance_kit_page_and_the_mutation_corpus_know_it(kind):
    page = (ROOT / "docs" / "conformance-kit.md").read_text(encoding="utf-8")
    undocumented = sorted(p for p in PROMISES[kind] if not re.search(rf"^\| {kind} \| `{p}` \|", page, re.M))
    assert not undocumented, missing(7, kind, f"docs/conformance-kit.md has no row for its promises {undocumented}")
    corpus = importlib.import_module("tests.verify.corpus")
    assert kind in corpus.KIND_MODULES and (ROOT / "tests" / "verify" / "corpus" / f"{kind}.py").is_file(), missing(
        7, kind, f"no mutation corpus module tests/verify/corpus/{kind}.py listed in KIND_MODULES")


@pytest.mark.parametrize("kind", SECTIONS)
def test_step_8_every_family_refuses_a_component_it_cannot_express(kind, example):
    other = ComponentSpec(kind=kind, name=NAME, distribution="blockspec.testing", config=ReferenceConfig())
    spec = attrs.evolve(example, **{kind: other})
    silent = [family.name for family in FAMILIES if not any(kind in why for why in family.misfits(spec))]
    assert not silent, missing(8, kind, f"families {silent} would export it without a word "
                                        "(interop/family.py's Expresses.misfits)")


@pytest.mark.parametrize("kind", KINDS)
def test_step_9_a_component_of_it_is_installed(kind, registry):
    catalogue = tomllib.loads((ROOT / "registry.toml").read_text(encoding="utf-8"))["distributions"]
    providers = {c.distribution for c in registry if c.kind == kind} & {"blockspec", *catalogue}
    assert providers, missing(9, kind, "neither the core nor a distribution in registry.toml provides one")


# ---------------------------------------------------------------- a kind that wraps the built model


def _wrapped(kind: str, registry, example) -> tuple[ModelSpec, object]:
    """The example with one entry of ``kind`` around every attention's linear layers, and the component."""
    component = next(c for c in registry if c.kind == kind and c.distribution != "blockspec.testing")
    document = {**spec_to_dict(example), WRAPPER_SECTIONS[kind]: [
        {"use": component.qualified_name, "targets": ["@attention"], "rank": 1}]}
    return blockspec.structure_spec(document, registry), component


@pytest.mark.parametrize("kind", WRAPPER_SECTIONS)
def test_wrapper_step_2_the_spec_has_an_array_of_it_empty_by_default(kind, example):
    section = WRAPPER_SECTIONS[kind]
    assert section in attrs.fields_dict(ModelSpec), missing(2, kind, f"ModelSpec has no field {section!r}")
    assert getattr(example, section) == () and section not in spec_to_dict(example), missing(
        3, kind, f"a spec without [[{section}]] does not read as () or dumps the array")


@pytest.mark.parametrize("kind", WRAPPER_SECTIONS)
def test_wrapper_step_4_the_assembler_applies_it_after_the_build(kind, registry, example):
    spec, component = _wrapped(kind, registry, example)
    assert blockspec.structure_spec(spec_to_dict(spec), registry) == spec, missing(3, kind, "it does not round-trip")
    model = blockspec.build(spec, registry=registry, seed=0)
    assert model.adapted and {c.kind for c in model.adapted.values()} == {kind}, missing(
        4, kind, "assembly/adapters.py applies none (no model.adapted entry)")
    base = blockspec.build(example, registry=registry, seed=0)
    ids = torch.zeros(1, 2, dtype=torch.long)
    with torch.no_grad():
        assert torch.equal(model(ids), base(ids)), missing(4, kind, "a fresh one changes what the model computes")


@pytest.mark.parametrize("kind", WRAPPER_SECTIONS)
def test_wrapper_step_5_the_harness_runs_its_contract(kind, registry):
    components = [c for c in registry if c.kind == kind and c.distribution != "blockspec.testing"]
    assert components and all(probe(c) is None for c in components), missing(
        5, kind, "the harness (testing/harness.py) cannot run its contract")


@pytest.mark.parametrize("kind", WRAPPER_SECTIONS)
def test_wrapper_step_8_every_family_refuses_it_unmerged(kind, registry, example):
    spec, _ = _wrapped(kind, registry, example)
    silent = [family.name for family in FAMILIES if not any(kind in why for why in family.misfits(spec))]
    assert not silent, missing(8, kind, f"families {silent} would export it without a word")


UNKNOWN = "router"  # a kind no table has: each check must refuse it with its step's number


@pytest.mark.parametrize(("step", "check"), [
    (1, lambda registry, example: test_step_1_the_kind_and_its_promises_are_named(UNKNOWN)),
    (2, lambda registry, example: test_step_2_the_spec_has_a_table_of_it(UNKNOWN, example)),
    (4, lambda registry, example: test_step_4_the_assembler_builds_it(UNKNOWN, registry, example)),
    (5, lambda registry, example: test_step_5_the_kit_has_a_reference_partner_the_harness_can_run(UNKNOWN)),
    (6, lambda registry, example: test_step_6_the_kit_has_its_properties_with_a_contract(UNKNOWN)),
    (9, lambda registry, example: test_step_9_a_component_of_it_is_installed(UNKNOWN, registry)),
])
def test_a_kind_that_skipped_a_step_fails_naming_it(step, check, registry, example):
    with pytest.raises((AssertionError, pytest.fail.Exception), match=f"'{UNKNOWN}' skipped step {step} "):
        check(registry, example)


# ---------------------------------------------------------------- the page names only what exists


def backticked(text: str) -> list[str]:
    """Every word in backticks that looks like a file or folder of the repository (has a slash)."""
    layout_names = {value for value in vars(layout).values() if isinstance(value, str)}
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # the fenced pictures are not prose
    words = [word.rstrip(".,;:") for span in re.findall(r"`([^`\n]+)`", prose) for word in span.split()]
    words = [w.split("<")[0].rpartition("/")[0] + "/" if "<" in w else w for w in words]  # `cli/<name>_cmd.py`: cli/
    return [w for w in words if "/" in w and not re.search(r"[>$*{}()\"']", w) and w not in layout_names]


def linked(text: str) -> list[str]:
    return [target.split("#")[0] for target in re.findall(r"\]\(([^)]+)\)", text) if not target.startswith("http")]


def where(word: str) -> Path:
    """A path as the page writes it: from the repository root when its first folder is there, else in the package."""
    first = word.split("/")[0]
    return ROOT / word if (ROOT / first).exists() else PACKAGE / word


def test_every_path_the_page_names_exists():
    text = PAGE.read_text(encoding="utf-8")
    named = backticked(text)
    assert len(named) > 20  # the page names its modules; a broken pattern would find none
    gone = sorted({word for word in named if not where(word).exists()})
    assert not gone, f"docs/architecture.md names paths that do not exist: {gone}"
    broken = sorted({target for target in linked(text) if not (PAGE.parent / target).exists()})
    assert not broken, f"docs/architecture.md links to files that do not exist: {broken}"


def test_every_blockspec_module_the_page_names_imports():
    text = PAGE.read_text(encoding="utf-8")
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    dotted = {m for span in re.findall(r"`([^`\n]+)`", prose) for m in re.findall(r"\bblockspec(?:\.\w+)+", span)}
    assert dotted
    unknown = sorted(name for name in dotted if not _resolves(name))
    assert not unknown, f"docs/architecture.md names blockspec modules or names that do not exist: {unknown}"


def _resolves(dotted: str) -> bool:
    """A module, or a name a module defines (``blockspec.interop.export_hf``)."""
    module, _, attribute = dotted.rpartition(".")
    try:
        importlib.import_module(dotted)
        return True
    except ImportError:
        pass
    try:
        return hasattr(importlib.import_module(module), attribute)
    except ImportError:
        return False


def test_the_path_check_catches_a_moved_module():
    assert where("spec/kinds.py").is_file() and where("tests/test_families.py").is_file()
    assert not where("spec/no_such_module.py").exists()
    assert backticked("see `spec/kinds.py`'s table, `cli/<name>_cmd.py`, `hf/` and `python benchmarks/x.py -q`") == [
        "spec/kinds.py", "cli/", "benchmarks/x.py"]
