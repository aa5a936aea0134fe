"""`blockspec schema [--out FILE] [--force] [--json]`: the schema on stdout or in a file, through the output policy."""

from __future__ import annotations

import json
import tomllib

import pytest
from jsonschema import Draft202012Validator

from blockspec.checkpoint.lock import LockDocument
from blockspec.registry.spec_schema import spec_schema

from .conftest import SPECS
from .cli_run import run


def test_the_schema_is_printed_and_is_the_registrys(capsys, registry):
    code, out, err = run(capsys, "schema")
    assert code == 0 and err == ""
    assert json.loads(out) == spec_schema(registry, documents=(LockDocument,))


def test_json_without_out_prints_the_same_schema(capsys):
    assert run(capsys, "schema", "--json")[1] == run(capsys, "schema")[1]


def test_every_installed_component_is_offered_third_party_plugins_included(capsys, registry):
    schema = json.loads(run(capsys, "schema")[1])
    for component in registry:
        assert component.name in schema["$defs"][component.kind]["properties"]["use"]["enum"]
    assert "blockspec-extras:alibi" in schema["$defs"]["positional"]["properties"]["use"]["enum"]
    assert "block.blockspec-extras:rezero" in schema["$defs"]


def test_out_writes_a_schema_that_validates_every_example(capsys, tmp_path):
    target = tmp_path / "spec.schema.json"
    code, out, err = run(capsys, "schema", "--out", str(target))
    assert (code, err) == (0, "")
    assert out.startswith(f"wrote {target}: the spec schema for ") and out.count("\n") == 1
    validator = Draft202012Validator(json.loads(target.read_text()))
    for path in sorted(SPECS.glob("*.toml")):
        assert validator.is_valid(tomllib.loads(path.read_text())), path.name


def test_out_with_json_reports_what_was_written(capsys, tmp_path, registry):
    target = tmp_path / "spec.schema.json"
    code, out, _ = run(capsys, "schema", "--out", str(target), "--json")
    report = json.loads(out)
    assert code == 0 and report["out"] == str(target) and report["components"] == len(registry)
    assert set(report["distributions"]) == set(registry.distributions())


def test_an_existing_file_is_refused_without_force_and_replaced_with_it(capsys, tmp_path):
    target = tmp_path / "spec.schema.json"
    run(capsys, "schema", "--out", str(target))
    target.write_text(target.read_text().replace('"title"', '"description": "old",\n  "title"', 1))
    before = target.read_text()
    code, out, err = run(capsys, "schema", "--out", str(target))
    assert (code, out) == (2, "")
    assert err == f"blockspec: error: --out: {target}: already exists; pass --force to replace it\n"
    assert target.read_text() == before
    assert run(capsys, "schema", "--out", str(target), "--force")[0] == 0
    assert target.read_text() != before


def test_force_never_replaces_a_file_that_is_not_a_schema_it_wrote(capsys, tmp_path):
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}\n')
    code, _, err = run(capsys, "schema", "--out", str(notes), "--force")
    assert code == 2 and err.count("\n") == 1 and "is not a blockspec spec schema" in err
    assert notes.read_text() == '{"mine": true}\n'


@pytest.mark.parametrize("where", ["missing/spec.schema.json", "missing/deeper/spec.schema.json"])
def test_out_into_a_missing_folder_is_one_line_and_creates_nothing(capsys, tmp_path, where):
    target = tmp_path / where
    code, out, err = run(capsys, "schema", "--out", str(target))
    assert (code, out) == (2, "")
    assert err == (f"blockspec: error: --out: {target}: the folder {str(target.parent)!r} does not exist; "
                   "create it first\n")
    assert not (tmp_path / "missing").exists()


def test_out_naming_a_folder_is_one_line(capsys, tmp_path):
    code, _, err = run(capsys, "schema", "--out", str(tmp_path))
    assert code == 2 and err == f"blockspec: error: --out: {tmp_path}: is a directory; expected a file name\n"
