"""Every document blockspec reads goes through spec.documents.structure_document: one format of problem."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockspec.checkpoint.lock import LockDocument
from blockspec.checkpoint.manifest import ManifestDocument
from blockspec.errors import CheckpointError, SpecError
from blockspec.registry.catalogue import RegistryDocument
from blockspec.spec.documents import MAX_PROBLEMS, structure_document
from blockspec.train.checkpointing import TrainingDocument

DOCUMENTS = [(RegistryDocument, SpecError), (ManifestDocument, CheckpointError), (LockDocument, CheckpointError),
             (TrainingDocument, CheckpointError)]
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=3), max_leaves=12)


def problems(data, cls, error) -> list[str]:
    with pytest.raises(error) as caught:
        structure_document(data, cls, file="f", error=error)
    return str(caught.value).splitlines()


def test_every_problem_at_once_with_path_and_did_you_mean():
    lines = problems({"format": "x", "format_version": 1, "files": {"../a": {"sha256": "0" * 64, "size": 1}},
                      "tensors": {"t": "nothex"}, "extar": {}}, ManifestDocument, CheckpointError)
    assert lines == [
        "f: $.format: expected 'blockspec-checkpoint', found str 'x'",
        "f: $.files[\"../a\"]: expected a safe file name: one or two plain parts like 'hf/config.json', "
        "found str '../a'",
        "f: $.tensors.t: expected 64 lowercase hex digits, found str 'nothex'",
        "f: $.extar: unknown key 'extar'; did you mean 'extra'?",
    ]


def test_the_lock_and_training_history_name_their_fields():
    assert problems({"lock": {"norm": {"distribution": "d", "verison": "1"}}}, LockDocument, CheckpointError) == [
        "f: $.lock.norm.version: missing required key",
        "f: $.lock.norm.verison: unknown key 'verison'; did you mean 'version'?",
    ]
    training = {"format": "blockspec-train-checkpoint", "version": 1, "step": -1, "config": {},
                "history": {"train": [1.0, "x"], "evals": [{"step": 1, "train_loss": 1.0}]}}
    assert problems(training, TrainingDocument, CheckpointError) == [
        "f: $.step: expected a step count, found int -1",
        "f: $.history.train[1]: expected a number, found str 'x'",
        "f: $.history.evals[0].val_loss: missing required key",
    ]


def test_a_document_with_many_problems_is_reported_in_bounded_lines():
    lines = problems({"distributions": {f"d{i}": {"provides": [i]} for i in range(1000)}}, RegistryDocument, SpecError)
    assert len(lines) == MAX_PROBLEMS + 1 and lines[-1] == "f: ... and 980 more problems"


@pytest.mark.parametrize(("cls", "error"), DOCUMENTS)
@given(data=JSON_VALUES)
def test_hostile_values_raise_only_the_documents_error(cls, error, data):
    try:
        structure_document(data, cls, file="f", error=error)
    except error as caught:
        assert all(len(line) < 400 for line in str(caught).splitlines())
