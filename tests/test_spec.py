"""The spec schema: strict structuring, every problem located, lossless round trip."""

from __future__ import annotations

import tomllib

import pytest
import tomli_w
from hypothesis import given
from hypothesis import strategies as st

import blockspec
from blockspec import SpecError, UnknownComponentError
from blockspec.spec import toml_read

from .conftest import SPECS
from .specs import spec_text

BASE = spec_text(name="t", vocab_size=65, context_length=64, d_model=64, n_layers=2, n_heads=4, d_ff=256)


def problems(text: str, registry) -> list[blockspec.Problem]:
    with pytest.raises(SpecError) as caught:
        blockspec.loads_spec(text, registry, file="bad.toml")
    return list(caught.value.problems)


def only_problem(text: str, registry) -> blockspec.Problem:
    found = problems(text, registry)
    assert len(found) == 1, [str(p) for p in found]
    return found[0]


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.toml")), ids=lambda p: p.stem)
def test_every_example_round_trips(path, registry):
    spec = blockspec.load_spec(path, registry)
    again = blockspec.loads_spec(blockspec.dump_spec(spec), registry)
    assert again == spec
    assert blockspec.dump_spec(again) == blockspec.dump_spec(spec)


def test_defaults_fill_in(registry):
    spec = blockspec.loads_spec(BASE, registry)
    assert spec.model.bias is True and spec.model.norm_placement == "pre"
    assert spec.model.kv_heads == 4 and spec.model.head_dim == 16
    assert spec.attention.name == "causal" and spec.attention.distribution == "blockspec"  # the built-in, pinned
    assert spec.norm.config.eps == 1e-5


@pytest.mark.parametrize(
    ("old", "new", "path", "words"),
    [
        ("d_model = 64", 'd_model = "64"', "$.model.d_model", "expected an integer, found str '64'"),
        ("d_model = 64", "d_model = 64.9", "$.model.d_model", "expected an integer, found float 64.9"),
        ("d_model = 64", "d_model = true", "$.model.d_model", "expected an integer, found bool True"),
        ('name = "t"', 'name = "t"\nbias = "false"', "$.model.bias", "expected true or false"),
        ('name = "t"', "name = 5", "$.model.name", "expected a string"),
        ('name = "t"', 'name = "t"\nnorm_placement = "middle"', "$.model.norm_placement", "expected one of 'pre', 'post'"),
        ("n_heads = 4", "n_heads = 5", "$.model.n_heads", "expected a divisor of d_model=64, found 5"),
        ("n_heads = 4", "n_heads = 4\nn_kv_heads = 3", "$.model.n_kv_heads", "expected a divisor of n_heads=4, found 3"),
        ("d_ff = 256", "d_ff = -1", "$.model.d_ff", "expected a positive integer, found -1"),
        ("n_layers = 2", "n_layers = 1025", "$.model.n_layers", "expected a number in [0, 1024], found 1025"),
        ('name = "t"', 'name = "t"\ndropout = 1.5', "$.model.dropout", "expected a number in [0.0, 1.0)"),
        ("n_heads = 4", "n_haeds = 4\nn_heads = 4", "$.model.n_haeds", "unknown key 'n_haeds'"),
        ('use = "gelu"', 'use = "gelu"\napproximate = "fast"', "$.activation.approximate", "expected one of 'none', 'tanh'"),
        ('use = "layernorm"', 'use = "layernorm"\neps = "small"', "$.norm.eps", "expected a number"),
        ('use = "layernorm"', 'use = "layernorm"\neps = 0', "$.norm.eps", "expected a number > 0.0"),
    ],
)
def test_bad_values_are_located(registry, old, new, path, words):
    problem = only_problem(BASE.replace(old, new, 1), registry)
    assert problem.path == path
    assert words in problem.message + (problem.hint or "")
    assert problem.file == "bad.toml" and problem.line is not None


def test_missing_key_and_table(registry):
    found = problems(BASE.replace("d_ff = 256\n", "").replace('[head]\nuse = "lm"\n', ""), registry)
    assert {(p.path, p.message) for p in found} == {
        ("$.model.d_ff", "missing required key"),
        ("$.head", "missing required table [head]"),
    }


def test_every_problem_is_reported_at_once(registry):
    text = BASE.replace("d_model = 64", 'd_model = "768"').replace("n_heads = 4", "n_haeds = 12")
    text = text.replace('use = "layernorm"', 'use = "rmsnrom"')
    found = {p.path: p for p in problems(text, registry)}
    assert set(found) == {"$.model.d_model", "$.model.n_haeds", "$.model.n_heads", "$.norm.use"}
    assert found["$.model.n_haeds"].hint == "did you mean 'n_heads'?"
    assert "did you mean 'rmsnorm'? (provided by blockspec-norms)" in str(found["$.norm.use"])
    assert found["$.norm.use"].line == 14


def located(text: str, registry) -> set[tuple[str, str]]:
    """Every problem as (path, message); each must carry file and line."""
    found = problems(text, registry)
    assert all(p.file == "bad.toml" and p.line is not None for p in found), [str(p) for p in found]
    assert len({p.path for p in found}) == len(found), [str(p) for p in found]  # one line per problem
    return {(p.path, p.message) for p in found}


def test_five_zero_sizes_are_five_problems(registry):
    text = BASE
    for key in ("vocab_size = 65", "context_length = 64", "d_model = 64", "n_heads = 4", "d_ff = 256"):
        text = text.replace(key, key.split(" = ")[0] + " = 0", 1)
    assert located(text, registry) == {
        (f"$.model.{key}", "expected a positive integer, found 0")
        for key in ("vocab_size", "context_length", "d_model", "n_heads", "d_ff")
    }


def test_zero_d_ff_and_dropout_above_one_are_both_reported(registry):
    text = BASE.replace("d_ff = 256", "d_ff = 0\ndropout = 1.5", 1)
    assert located(text, registry) == {
        ("$.model.d_ff", "expected a positive integer, found 0"),
        ("$.model.dropout", "expected a number in [0.0, 1.0), found 1.5"),
    }


def test_cross_field_checks_run_on_the_fields_that_are_valid(registry):
    text = BASE.replace("n_layers = 2", "n_layers = -2", 1).replace("n_heads = 4", "n_heads = 5", 1)
    assert located(text, registry) == {
        ("$.model.n_layers", "expected a number in [0, 1024], found -2"),
        ("$.model.n_heads", "expected a divisor of d_model=64, found 5"),
    }
    both = BASE.replace("n_heads = 4", "n_heads = 6\nn_kv_heads = 4", 1)  # two cross-field problems at once
    assert located(both, registry) == {
        ("$.model.n_heads", "expected a divisor of d_model=64, found 6"),
        ("$.model.n_kv_heads", "expected a divisor of n_heads=6, found 4"),
    }
    invalid_d_model = BASE.replace("d_model = 64", "d_model = 0", 1).replace("n_heads = 4", "n_heads = 5", 1)
    assert {path for path, _ in located(invalid_d_model, registry)} == {"$.model.d_model"}  # nothing to divide


INVALID_MODEL_VALUES = {
    "name": st.integers(),
    "vocab_size": st.integers(max_value=0) | st.text(max_size=3),
    "context_length": st.integers(-(2**63), 0),
    "d_model": st.integers(-(2**63), 0) | st.floats(allow_nan=False),
    "n_layers": st.integers(-(2**63), -1) | st.integers(1025, 2**63 - 1),
    "n_heads": st.integers(-(2**63), 0) | st.booleans(),
    "n_kv_heads": st.integers(-(2**63), 0),
    "d_ff": st.integers(-(2**63), 0),
    "bias": st.integers() | st.text(max_size=3),
    "norm_placement": st.text(max_size=5).filter(lambda t: t not in ("pre", "post")),
    "final_norm": st.integers(),
    "dropout": st.floats(min_value=1.0, allow_nan=False, allow_infinity=False) | st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False),
}


@given(st.dictionaries(st.sampled_from(sorted(INVALID_MODEL_VALUES)), st.none(), min_size=1).flatmap(
    lambda keys: st.fixed_dictionaries({k: INVALID_MODEL_VALUES[k] for k in keys})))
def test_any_set_of_invalid_model_fields_is_reported_in_full(registry, invalid):
    document = tomllib.loads(BASE)
    document["model"].update(invalid)
    text = tomli_w.dumps(document)
    assert {path for path, _ in located(text, registry)} == {f"$.model.{key}" for key in invalid}


def test_unknown_component_is_its_own_error_type(registry):
    with pytest.raises(UnknownComponentError) as caught:
        blockspec.loads_spec(BASE.replace('use = "gelu"', 'use = "gleu"'), registry, file="bad.toml")
    assert isinstance(caught.value, LookupError)
    assert str(caught.value) == (
        "bad.toml:17: $.activation.use: unknown activation 'gleu'; did you mean 'gelu'? "
        "(provided by blockspec-activations)"
    )


def test_unknown_table_and_wrong_table_type(registry):
    found = problems(BASE + '\n[atention]\nuse = "causal"\n', registry)
    assert [(p.path, p.hint) for p in found] == [("$.atention", "did you mean 'attention'?")]
    wrong = 'head = "lm"\n' + BASE.replace('[head]\nuse = "lm"\n', "")
    problem = only_problem(wrong, registry)
    assert (problem.path, problem.message) == ("$.head", "expected a table [head], found str 'lm'")


def test_use_must_be_a_string(registry):
    problem = only_problem(BASE.replace('use = "gelu"', "use = 3"), registry)
    assert problem.path == "$.activation.use" and "found int 3" in problem.message
    assert "'gelu'" in problem.message  # lists what is installed


def test_toml_syntax_error_has_line_and_column(registry):
    problem = only_problem("[model\nx = 1\n", registry)
    assert (problem.line, problem.column) == (1, 7)
    assert problem.message.startswith("invalid TOML")


def test_pinned_distribution(registry):
    spec = blockspec.loads_spec(BASE.replace('use = "layernorm"', 'use = "blockspec-norms:layernorm"'), registry)
    assert spec.norm.distribution == "blockspec-norms"
    assert 'use = "blockspec-norms:layernorm"' in blockspec.dump_spec(spec)
    problem = only_problem(BASE.replace('use = "layernorm"', 'use = "other-dist:layernorm"'), registry)
    assert "not provided by 'other-dist'" in problem.message and "blockspec-norms" in problem.hint


def test_load_spec_reports_unreadable_files(tmp_path, registry):
    with pytest.raises(SpecError, match="cannot read spec"):
        blockspec.load_spec(tmp_path / "absent.toml", registry)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe[model]")
    with pytest.raises(SpecError, match="not UTF-8"):
        blockspec.load_spec(binary, registry)


sizes = st.integers(min_value=1, max_value=8)


@st.composite
def model_tables(draw) -> dict:
    kv = draw(sizes)
    heads = kv * draw(st.integers(1, 4))
    table = {
        "name": draw(st.text(min_size=1, max_size=12)),
        "vocab_size": draw(st.integers(1, 10**6)),
        "context_length": draw(st.integers(1, 10**5)),
        "d_model": heads * draw(sizes),
        "n_layers": draw(st.integers(0, 48)),
        "n_heads": heads,
        "d_ff": draw(st.integers(1, 10**5)),
        "bias": draw(st.booleans()),
        "norm_placement": draw(st.sampled_from(["pre", "post"])),
        "dropout": draw(st.floats(0.0, 0.99)),
    }
    if draw(st.booleans()):
        table["n_kv_heads"] = kv
    if draw(st.booleans()):
        table["final_norm"] = draw(st.booleans())
    return table


@given(table=model_tables(), eps=st.floats(1e-12, 1.0), base=st.floats(2.0, 1e6))
def test_round_trip_of_random_specs(registry, table, eps, base):
    data = {
        "model": table,
        "positional": {"use": "rope", "base": base},
        "norm": {"use": "rmsnorm", "eps": eps},
        "activation": {"use": "swiglu"},
        "head": {"use": "lm", "tied": False},
    }
    spec = blockspec.structure_spec(data, registry)
    assert blockspec.loads_spec(blockspec.dump_spec(spec), registry) == spec
    assert blockspec.spec_to_dict(spec)["model"] == table


@pytest.mark.parametrize("name", ["a\x7fb", "tab\there", "quote\"back\\slash", "\x00\x1f", "naïve ✓"])
def test_names_with_control_characters_round_trip(registry, name):
    data = blockspec.spec_to_dict(blockspec.loads_spec(BASE, registry))
    data["model"]["name"] = name
    spec = blockspec.structure_spec(data, registry)
    assert blockspec.loads_spec(blockspec.dump_spec(spec), registry).model.name == name


@given(key=st.text(max_size=40), value=st.text(max_size=200))
def test_tomli_w_output_passes_the_guarded_reader(key, value):
    """Any string hypothesis draws, as key or value, written by tomli-w, reads back through the guard."""
    text = tomli_w.dumps({"model": {key: value, "name": value}})
    assert toml_read.parse(text, "t.toml") == {"model": {key: value, "name": value}}


def test_init_table_round_trips_and_is_checked(registry):
    assert "[init]" not in blockspec.dump_spec(blockspec.loads_spec(BASE, registry))  # GPT-2's default, unwritten
    spec = blockspec.loads_spec(BASE + "\n[init]\nembedding_std = 1.0\n", registry)
    assert (spec.init.std, spec.init.token_embedding_std, spec.init.residual_scaling) == (0.02, 1.0, True)
    assert blockspec.loads_spec(blockspec.dump_spec(spec), registry) == spec
    bad = BASE + '\n[init]\nstd = 0.0\nembedding_std = "big"\nresidual_scale = true\n'
    assert located(bad, registry) == {
        ("$.init.std", "expected a number > 0.0, found 0.0"),
        ("$.init.embedding_std", "expected a number, found str 'big'"),
        ("$.init.residual_scale", "unknown key 'residual_scale'"),
    }
