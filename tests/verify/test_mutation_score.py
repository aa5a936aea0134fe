"""The mutation corpus (tests/verify/corpus): every mutant is caught by the property it names, and every
correct but unusual component passes every property, at the CLI's default budget.

What today's kit misses is marked xfail(strict=True) with the property or change that catches it, so
the merge that brings it turns the mark into a failure until the mark goes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from blockspec.testing.runner import DEFAULT_MAX_EXAMPLES
from tests.verify.corpus import KIND_MODULES, MUTANTS, UNUSUAL, entries
from tests.verify.corpus import mutants, unusual
from tests.verify.corpus.__main__ import main as score_main
from tests.verify.corpus.score import component, judge_correct, judge_mutant, load_corpus

DOCS = Path(__file__).resolve().parents[2] / "docs" / "conformance-kit.md"

MISSED: dict[str, str] = {  # mutant -> why today's kit misses it (none: the score is 100%)
}

FALSE_POSITIVES: dict[str, str] = {  # correct component -> why today's kit fails it (none)
}


def _params(chosen, marks: dict[str, str]) -> list:
    return [pytest.param(e, id=e.qualified, marks=[pytest.mark.xfail(strict=True, reason=marks[e.qualified])]
                         if e.qualified in marks else []) for e in chosen]


@pytest.fixture(scope="module")
def corpus_registry():
    return load_corpus()


def test_the_corpus_holds_at_least_40_mutants_5_per_kind_and_a_mixture_of_experts() -> None:
    found = mutants()
    assert len(found) >= 40
    for kind in KIND_MODULES:
        assert sum(e.kind == kind for e in found) >= 5, kind
    assert any(e.name.startswith("moe_") for e in found)
    assert len({e.qualified for e in entries()}) == len(entries())


def test_every_entry_registers_under_its_distribution(corpus_registry) -> None:
    assert not corpus_registry.quarantined
    for entry in entries():
        registered = component(corpus_registry, entry)
        assert registered.distribution == (UNUSUAL if entry.catches is None else MUTANTS)
        assert registered.promises == frozenset(entry.promises)


def test_the_marks_name_real_entries() -> None:
    assert set(MISSED) <= {e.qualified for e in mutants()}
    assert set(FALSE_POSITIVES) <= {e.qualified for e in unusual()}


@pytest.mark.parametrize("entry", _params(mutants(), MISSED))
def test_each_mutant_is_caught_by_the_property_it_names(corpus_registry, entry) -> None:
    verdict = judge_mutant(entry, component(corpus_registry, entry), max_examples=DEFAULT_MAX_EXAMPLES)
    assert verdict.caught, f"{entry.qualified} ({entry.bug}) is not caught by {entry.catches}: {verdict.detail}"
    assert f"{entry.qualified} (from {MUTANTS} " in verdict.detail
    assert f"fails {entry.catches}:" in verdict.detail


@pytest.mark.parametrize("entry", _params(unusual(), FALSE_POSITIVES))
def test_each_correct_but_unusual_component_passes_every_property(corpus_registry, entry) -> None:
    verdict = judge_correct(entry, component(corpus_registry, entry), max_examples=DEFAULT_MAX_EXAMPLES)
    assert verdict.caught, f"{entry.qualified} ({entry.bug}) fails {', '.join(verdict.failed)}: {verdict.detail}"


def test_the_score_command_prints_the_score_and_each_catching_property(capsys) -> None:
    code = score_main(["--kind", "head"])  # the default budget: the score the corpus must hold
    out = capsys.readouterr().out
    score = re.search(r"mutation score: (\d+)/(\d+)", out)
    assert score and int(score[2]) == sum(e.kind == "head" for e in mutants())
    assert "caught  head:lm_copied" in out and "by tied" in out
    assert "MISSED" not in out and "FAIL" not in out and code == 0


def test_the_bug_class_table_lists_each_mutant_under_the_property_it_names() -> None:
    rows = [line.split("|")[1:3] for line in DOCS.read_text(encoding="utf-8").splitlines()
            if line.startswith(("| `", "| attention"))]
    for entry in mutants():
        cells = [first for first, classes in rows if f"(`{entry.name}`" in classes or f"`{entry.name}`)" in classes]
        assert len(cells) == 1 and f"`{entry.catches}`" in cells[0], entry.qualified
