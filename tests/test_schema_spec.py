"""The spec's JSON Schema (registry/spec_schema.py): valid specs validate, broken ones fail at the broken key.

The reader is the judge: the schema may say less than it (checks that relate fields), never more, so
every spec the reader accepts must validate, and each broken spec below fails both.
"""

from __future__ import annotations

import ast
import copy
import string
import tomllib
from pathlib import Path

import attrs
import pytest
from attrs import field, frozen
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

import blockspec
from blockspec.checkpoint.lock import LockDocument
from blockspec.errors import BlockspecError
from blockspec.registry.components import Component, Registry
from blockspec.registry.spec_schema import spec_schema
from blockspec.spec import schema as spec_tables
from blockspec.spec.config_schema import field_docs
from blockspec.spec.convert import spec_to_dict
from blockspec.spec.validators import at_least, greater_than, in_range, one_of, positive
from blockspec.testing.strategies import model_specs

from .conftest import SPECS
from .specs import spec_text
from .test_layer_variation import NARROW

TESTS = Path(__file__).parent


@pytest.fixture(scope="module")
def validator(registry) -> Draft202012Validator:
    return Draft202012Validator(spec_schema(registry, documents=(LockDocument,)))


def errors(validator: Draft202012Validator, document: dict) -> list[tuple[str, str]]:
    return [(error.json_path, error.message) for error in validator.iter_errors(document)]


def example(stem: str) -> dict:
    return tomllib.loads((SPECS / f"{stem}.toml").read_text())


def test_the_schema_is_valid_draft_2020_12(registry):
    schema = spec_schema(registry, documents=(LockDocument,))
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.toml")), ids=lambda p: p.stem)
def test_every_example_spec_validates(path, validator):
    assert errors(validator, tomllib.loads(path.read_text())) == []


def _test_spec_texts() -> list[tuple[str, str]]:
    """Every module-level spec in tests/: TOML text (templates filled: 6 layers, other fields empty; a
    [[layers]]-only one after test_layer_variation's BASE) and ``spec_text(...)`` calls with literal arguments."""
    base = _fill(_constants(TESTS / "test_layer_variation.py")["BASE"])
    found = []
    for module in sorted(TESTS.glob("test_*.py")):
        for name, text in _constants(module).items():
            text = _fill(text)
            text = base + text if text.lstrip().startswith("[[layers]]") else text
            if "[model]" in text and _loads(text):
                found.append((f"{module.stem}.{name}", text))
    return found


def _loads(text: str) -> bool:
    """A valid spec (a template filled with empty fields may not be one: it is left out)."""
    try:
        blockspec.loads_spec(text, REGISTRY_PLUS)
    except BlockspecError:
        return False
    return True


def _fill(template: str) -> str:
    """A str.format template's fields filled; TOML whose braces are inline tables, as it is."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError:
        return template
    if not all(name.isidentifier() for name in names):
        return template
    return template.format(**{name: 6 if name == "n_layers" else "" for name in names})


def _constants(module: Path) -> dict[str, str]:
    """Module-level names bound to a string literal or to spec_text(...) of literals."""
    found = {}
    for node in ast.parse(module.read_text()).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            found[node.targets[0].id] = value.value
        elif isinstance(value, ast.Call) and getattr(value.func, "id", None) == "spec_text" and not value.args:
            try:
                found[node.targets[0].id] = spec_text(**{k.arg: ast.literal_eval(k.value) for k in value.keywords})
            except ValueError:  # an argument computed at import
                continue
    return found


REGISTRY_PLUS = Registry.of([*blockspec.load_registry(), NARROW])  # test_layer_variation's specs name NARROW
TEST_SPECS = _test_spec_texts()


def test_the_tests_hold_specs_to_check():
    assert len(TEST_SPECS) >= 15, [name for name, _ in TEST_SPECS]


@pytest.mark.parametrize(("name", "text"), TEST_SPECS, ids=[name for name, _ in TEST_SPECS])
def test_every_valid_spec_of_the_tests_validates(name, text):
    validator = Draft202012Validator(spec_schema(REGISTRY_PLUS))
    assert errors(validator, tomllib.loads(text)) == [], name


def test_a_misspelt_key_fails_at_its_table(validator):
    document = example("tiny-shakespeare")
    document["model"]["d_modle"] = document["model"].pop("d_model")
    found = errors(validator, document)
    assert ("$.model", "Additional properties are not allowed ('d_modle' was unexpected)") in found
    assert ("$.model", "'d_model' is a required property") in found


def test_a_misspelt_table_fails(validator):
    document = example("tiny-shakespeare")
    document["attenton"] = {"use": "causal"}
    assert errors(validator, document) == [("$", "Additional properties are not allowed ('attenton' was unexpected)")]


@pytest.mark.parametrize(("table", "key", "value"), [
    ("model", "n_layers", "12"), ("model", "bias", 1), ("model", "dropout", 1.0), ("model", "n_heads", 0),
    ("model", "norm_placement", "middle"), ("model", "embedding_scale", "sqrt"), ("init", "std", 0.0),
])
def test_a_wrong_type_or_value_fails_at_its_key(validator, registry, table, key, value):
    document = example("tiny-shakespeare")
    document.setdefault(table, {})[key] = value
    assert [path for path, _ in errors(validator, document)] == [f"$.{table}.{key}"]
    with pytest.raises(BlockspecError):  # and the reader agrees
        blockspec.structure_spec(document, registry)


def test_an_unknown_use_fails(validator):
    document = example("tiny-shakespeare")
    document["positional"]["use"] = "rotary"
    (path, message), = errors(validator, document)
    assert path == "$.positional.use" and message.startswith("'rotary' is not one of ['alibi',")


def test_a_misspelt_field_of_the_chosen_component_fails(validator):
    document = example("gemma-2-2b")
    document["attention"]["sliding_windw"] = document["attention"].pop("sliding_window")
    assert errors(validator, document) == [
        ("$.attention", "Additional properties are not allowed ('sliding_windw' was unexpected)")]


def test_a_field_of_another_component_of_the_kind_fails(validator):
    document = example("tiny-shakespeare")  # learned positions: no base
    document["positional"]["base"] = 10000.0
    assert errors(validator, document) == [
        ("$.positional", "Additional properties are not allowed ('base' was unexpected)")]


def test_a_component_pinned_to_its_distribution_picks_its_branch(validator):
    document = example("gemma-2-2b")
    document["positional"]["use"] = "blockspec-positional:rope"
    assert errors(validator, document) == []
    document["positional"]["bse"] = 1.0
    assert errors(validator, document) == [
        ("$.positional", "Additional properties are not allowed ('bse' was unexpected)")]


def test_layers_entries_are_checked(validator):
    document = example("gemma-2-2b")
    entry = document["layers"][0]
    entry["attention"]["logit_sofcap"] = entry["attention"].pop("logit_softcap")  # use given: its fields exactly
    document["layers"].append({"evry": 2, "norm": {"epps": 1e-5}})  # no use: the fields of some norm
    document["layers"].append({"index": [0], "head": {"use": "lm"}})  # head is model-wide
    found = {path for path, _ in errors(validator, document)}
    assert found == {"$.layers[0].attention", "$.layers[1]", "$.layers[1].norm", "$.layers[2]"}


def test_a_layers_entry_without_use_may_set_a_field_of_a_component_an_earlier_entry_chose(validator, registry):
    document = example("tiny-shakespeare")
    document["model"]["n_layers"] = 4
    document["layers"] = [{"every": 2, "ffn": {"use": "moe"}}, {"index": [2], "ffn": {"top_k": 1}}]
    blockspec.structure_spec(document, registry)  # the reader accepts it, so the schema must
    assert errors(validator, document) == []


def test_a_checkpoints_lock_table_validates(validator, tmp_path, registry):
    spec = blockspec.load_spec(SPECS / "tiny-shakespeare.toml", registry)
    blockspec.save(blockspec.build(spec, registry=registry, seed=0), tmp_path / "ck")
    assert "lock" in (document := tomllib.loads((tmp_path / "ck" / "spec.toml").read_text()))
    assert errors(validator, document) == []


def test_a_registered_component_brings_its_fields_and_docs():
    @frozen(kw_only=True)
    class WideConfig:
        """A test FFN.

        width: how wide the
        hidden layer is.
        """

        width: int = field(default=16, validator=positive)

    wide = Component(kind="ffn", name="wide", config_cls=WideConfig, build=lambda config, ctx: None,
                     distribution="test-ffns", version="1.0")
    schema = spec_schema(Registry.of([*blockspec.load_registry(), wide]))
    fields = schema["$defs"]["ffn.test-ffns:wide"]
    assert fields["properties"]["width"] == {"type": "integer", "minimum": 1, "default": 16,
                                             "description": "how wide the hidden layer is."}
    assert "A test FFN." in fields["description"]
    validator = Draft202012Validator(schema)
    document = example("tiny-shakespeare") | {"ffn": {"use": "wide", "width": 8}}
    assert errors(validator, document) == []
    document["ffn"]["width"] = 0
    assert [path for path, _ in errors(validator, document)] == ["$.ffn.width"]


def test_a_name_two_distributions_provide_is_offered_only_pinned(registry):
    twin = attrs.evolve(registry.get("norm", "rmsnorm"), distribution="other-norms")
    schema = spec_schema(Registry.of([*registry, twin]))
    uses = schema["$defs"]["norm"]["properties"]["use"]["enum"]
    assert "rmsnorm" not in uses and {"blockspec-norms:rmsnorm", "other-norms:rmsnorm"} <= set(uses)


def test_field_docs_follow_the_docstring_convention():
    from blockspec.assembly.builtin import CausalAttentionConfig

    docs = field_docs(CausalAttentionConfig)
    assert docs["sliding_window"].startswith("each query attends to the last w positions")
    assert docs["qkv_bias"] == docs["out_bias"] and "[model] bias" in docs["qkv_bias"]
    assert docs["qk_norm"].endswith("(eps qk_norm_eps);")  # continuation lines joined


def test_every_field_of_the_cores_tables_is_described(registry):
    schema = spec_schema(registry)
    for table in (schema["properties"]["model"], schema["properties"]["init"]):
        assert all(field.get("description") for field in table["properties"].values()), table["description"]


CHECKS = [spec_tables.POSITIVE, spec_tables.VOCAB, spec_tables.LAYERS, spec_tables.PROBABILITY, spec_tables.STD,
          spec_tables.EMBEDDING_SCALE]
VALIDATORS = [positive, at_least(0.5), greater_than(1.0), in_range(0.0, 1.0), in_range(1, 4, high_open=False),
              one_of(("a", "b"))]
EDGES = [-1, 0, 0.0, 0.5, 0.99, 1, 1.0, 1.5, 4, 5, 1024, 1025, 2**24, 2**24 + 1, "a", "c", "sqrt_d"]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.expected)
def test_a_checks_stated_keywords_say_what_its_test_does(check):
    for value in EDGES:
        try:
            passes = bool(check.test(value))
        except TypeError:
            continue  # a string where the check compares numbers: the field's type refuses it first
        assert Draft202012Validator(dict(check.json_schema)).is_valid(value) == passes, (check.expected, value)


@pytest.mark.parametrize("check", VALIDATORS, ids=lambda v: str(dict(v.json_schema)))
def test_a_validators_stated_keywords_say_what_it_checks(check):
    attribute = attrs.fields(attrs.make_class("Probe", {"value": attrs.field()}))[0]
    for value in EDGES:
        try:
            check(None, attribute, value)
            passes = True
        except TypeError:
            continue
        except ValueError:  # FieldError
            passes = False
        assert Draft202012Validator(dict(check.json_schema)).is_valid(value) == passes, (dict(check.json_schema), value)


@settings(max_examples=40)
@given(data=st.data())
def test_every_spec_the_kit_draws_validates(data, registry, validator):
    spec = data.draw(model_specs(registry))
    assert errors(validator, spec_to_dict(spec)) == []


def test_each_component_in_each_example_validates_where_the_reader_accepts_it(validator, registry):
    """Each example with each kind's table swapped for each installed component's bare table."""
    tried = 0
    for path in sorted(SPECS.glob("*.toml")):
        document = tomllib.loads(path.read_text())
        for component in registry:
            changed = copy.deepcopy(document) | {component.kind: {"use": component.qualified_name}}
            try:
                blockspec.structure_spec(changed, registry)
            except BlockspecError:  # the classifier's n_classes, a block that disagrees with norm_placement
                continue
            tried += 1
            assert errors(validator, changed) == [], (path.stem, component.qualified_name)
    assert tried > 200
