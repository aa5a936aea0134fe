"""Spec fuzzing: whatever text, tree or file a user feeds in, the only failure is a located SpecError.

Properties, for every input:
- ``load_spec`` / ``loads_spec`` / ``structure_spec`` return a ModelSpec or raise SpecError, nothing else;
- every Problem names the file, has a ``$.path`` or a line, a message, and prints as one line;
- a spec that loads holds exactly the values written (no silent coercion);
- loading never imports, compiles or executes anything (checked with an audit hook);
- ``blockspec check`` exits 0 or 2 and prints only located error lines, never a traceback.

The counts each test reached are printed in the terminal summary ("spec fuzz counts").
Example budgets scale with the hypothesis profile (FUZZ_SCALE x the profile's max_examples).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import sys
import tempfile
import tomllib
from collections import Counter
from pathlib import Path

import attrs
import pytest
import tomli_w
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import blockspec
from blockspec import SpecError, load_spec, loads_spec, spec_to_dict, structure_spec
from blockspec.cli import main as cli_main
from blockspec.spec.convert import TOP_LEVEL
from blockspec.spec.problems import join
from blockspec.spec.toml_read import MAX_LINE_CHARS, MAX_NESTING

from .conftest import SPECS

FILE = "fuzz.toml"
FUZZ_SCALE = 5  # string-level examples are cheap: 5x the profile's budget
COUNTS: dict[str, Counter] = {}


def fuzz_settings(scale: int = FUZZ_SCALE) -> settings:
    return settings(max_examples=settings.default.max_examples * scale)


def count(test: str, outcome: str, n: int = 1) -> None:
    COUNTS.setdefault(test, Counter())[outcome] += n


class _CountReporter:
    """Prints COUNTS at the end of the run (pytest calls this plugin's hook)."""

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not COUNTS:
            return
        terminalreporter.section("spec fuzz counts")
        for test, counts in sorted(COUNTS.items()):
            parts = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
            terminalreporter.write_line(f"{test}: {parts}")


@pytest.fixture(scope="module", autouse=True)
def report_counts(request):
    reporter = _CountReporter()
    if not request.config.pluginmanager.is_registered(reporter):
        request.config.pluginmanager.register(reporter, "spec-fuzz-counts")
    yield


# ---------------------------------------------------------------- audit: nothing runs


class _Audit:
    """Records import/compile/exec events while watching; an audit hook cannot be removed, so it idles."""

    EVENTS = ("import", "compile", "exec", "os.system", "subprocess.Popen", "os.exec", "os.posix_spawn")

    def __init__(self) -> None:
        self.watching = False
        self.seen: list[tuple[str, str]] = []
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple) -> None:
        if self.watching and event in self.EVENTS:
            self.seen.append((event, repr(args)[:120]))

    @contextlib.contextmanager
    def watch(self):
        self.seen.clear()
        self.watching = True
        try:
            yield self.seen
        finally:
            self.watching = False


AUDIT = _Audit()


@pytest.fixture(scope="module")
def warm_registry(registry):
    """Load every example and touch every config class once: cattrs and attrs compile their
    structuring code on first use, and their unstructuring code too (a [[layers]] entry is merged over
    the model-wide config's table); after this, loading a spec must compile nothing."""
    for path in sorted(SPECS.glob("*.toml")):
        load_spec(path, registry)
    from blockspec.registry.catalogue import catalogue
    from blockspec.spec.strict import CONVERTER as _CONVERTER

    catalogue()  # read once from the package's data, then cached
    for component in registry:
        with contextlib.suppress(Exception):
            _CONVERTER.structure({}, component.config_cls)
        with contextlib.suppress(Exception):
            _CONVERTER.unstructure(component.config_cls())
    return registry


def load_text(text: str, registry) -> blockspec.ModelSpec | None:
    """loads_spec under audit; returns the spec or None after checking the SpecError."""
    with AUDIT.watch() as seen:
        try:
            return loads_spec(text, registry, file=FILE)
        except SpecError as error:
            assert_located(error, FILE)
            return None
        finally:
            assert not seen, f"loading a spec ran code: {seen}"


def assert_located(error: SpecError, file: str) -> None:
    assert error.problems, "a SpecError must carry at least one problem"
    for problem in error.problems:
        assert problem.file == file, problem
        assert problem.message.strip(), problem
        assert problem.path is not None or problem.line is not None, f"unlocated: {problem}"
        assert problem.path is None or problem.path.startswith("$"), problem
        assert "\n" not in str(problem), f"not one line: {str(problem)!r}"


# ---------------------------------------------------------------- TOML text (tomli-w, as the library writes it)


def toml_string(text: str) -> str:
    """``text`` as a TOML string literal, for splicing into a spec's text."""
    return tomli_w.dumps({"k": text}).removeprefix("k = ").removesuffix("\n")


def to_toml(document: dict) -> str:
    return tomli_w.dumps(document)


# ---------------------------------------------------------------- strategies


def schema_keys() -> list[str]:
    """Every key the schema knows: [model] fields, 'use', and every registered config's fields."""
    registry = blockspec.load_registry()
    keys = {a.name for a in attrs.fields(blockspec.ModelConfig)} | {"use"}
    for component in registry:
        keys |= {a.name for a in attrs.fields(component.config_cls)}
    return sorted(keys)


def schema_words() -> list[str]:
    registry = blockspec.load_registry()
    names = [c.name for c in registry] + [c.qualified_name for c in registry]
    return names + ["pre", "post", "tanh", "none", "half", "interleaved", "last", "mean", "os:system"]


SCALARS = st.one_of(
    st.sampled_from([0, 1, 2, 4, 8, 16, 64, -1]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.booleans(),
    st.sampled_from(schema_words()),
    st.text(max_size=12),
    st.datetimes(min_value=dt.datetime(1, 1, 1)),
    st.dates(),
    st.times(),
)
SCHEMA_KEYS = frozenset(schema_keys())
KEYS = st.one_of(st.sampled_from(sorted(SCHEMA_KEYS)), st.text(max_size=10))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                      max_leaves=6)
TABLES = st.dictionaries(KEYS, VALUES, max_size=8)
TREES = st.dictionaries(st.sampled_from(TOP_LEVEL) | st.text(max_size=8), TABLES | VALUES, max_size=7)

TOKENS = st.sampled_from([
    "[model]", "[norm]", "[[head]]", "use = ", '"rmsnorm"', "d_model = 8", "=", ".", ",", "[", "]", "{", "}",
    '"', "'", '"""', "'''", "#", "\n", " ", "\\", "\\u00e9", "1e400", "nan", "-inf", "0x10", "1979-05-27",
    "true", "a.b.c", "\x00", "\x7f", "\ufeff", "é",
])
RAW_TEXTS = st.one_of(st.text(max_size=300), st.lists(TOKENS | st.text(max_size=3), max_size=60).map("".join))


def example_documents() -> dict[str, dict]:
    return {p.stem: tomllib.loads(p.read_text(encoding="utf-8")) for p in sorted(SPECS.glob("*.toml"))}


EXAMPLES = example_documents()


@st.composite
def overridden_examples(draw):
    """An example spec with up to three keys set to arbitrary values: trees that sometimes load."""
    document = json.loads(json.dumps(draw(st.sampled_from(sorted(EXAMPLES)).map(EXAMPLES.get))))
    overrides = draw(st.lists(st.tuples(st.sampled_from(TOP_LEVEL), KEYS, SCALARS), max_size=3))
    for table, key, value in overrides:
        if isinstance(document.setdefault(table, {}), dict):  # not into the [[layers]] array
            document[table][key] = value
    return document


def other_type_values(value) -> st.SearchStrategy:
    """Values of a different TOML type than ``value`` (ints stay out of float fields: they are exact)."""
    options = [st.text(max_size=8), st.lists(st.integers(0, 9), max_size=2), st.dates(),
               st.dictionaries(st.just("x"), st.integers(0, 3), max_size=1)]
    if not isinstance(value, bool):
        options.append(st.booleans())
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        options.append(st.integers(-5, 2**40))
    if not isinstance(value, float):
        options.append(st.floats(allow_nan=False).filter(lambda f: not f.is_integer()))
    if isinstance(value, str):
        options.remove(options[0])
    return st.one_of(options)


@st.composite
def mutated(draw):
    """An example spec with one mutation: (document, mutation kind, path of the mutated key or None)."""
    document = json.loads(json.dumps(draw(st.sampled_from(sorted(EXAMPLES)).map(EXAMPLES.get))))
    table = draw(st.sampled_from(sorted(t for t, body in document.items() if isinstance(body, dict))))
    key = draw(st.sampled_from(sorted(document[table])))
    value = document[table][key]
    optional = table in ("init", "attention", "block", "ffn")  # dropping an optional table is no problem
    kinds = ["drop", "misspell", "swap", "huge", "deep"] + ([] if optional else ["drop_table"]) + (["exact_int"] if type(value) is float else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "drop":
        del document[table][key]
    elif kind == "drop_table":
        del document[table]
        return document, kind, f"$.{table}"
    elif kind == "misspell":
        wrong = draw(misspellings(key))
        assume(wrong not in document[table] and wrong not in SCHEMA_KEYS)
        document[table][wrong] = document[table].pop(key)
        if key == "use":  # the component is unknown, so its keys cannot be checked: the problem is at use
            return document, kind, f"$.{table}.use"
        return document, kind, join(f"$.{table}", wrong)
    elif kind == "swap":
        document[table][key] = draw(other_type_values(value))
    elif kind == "exact_int":  # the one allowed widening: an int a float holds exactly
        document[table][key] = draw(st.integers(-(2**53), 2**53))
    elif kind == "huge":
        document[table][key] = draw(st.sampled_from([2**63, -(2**63) - 1, 2**64 + 1, 10**30, 1e308 * 10]))
    else:
        document[table][key] = draw(st.integers(2, 40).map(lambda n: nested(n)))
    return document, kind, f"$.{table}.{key}"


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def misspellings(draw, key: str) -> str:
    i = draw(st.integers(0, max(len(key) - 1, 0)))
    edit = draw(st.sampled_from(["delete", "insert", "swap", "case"]))
    if edit == "delete" and len(key) > 1:
        return key[:i] + key[i + 1 :]
    if edit == "swap" and len(key) > 1 and i + 1 < len(key) and key[i] != key[i + 1]:
        return key[:i] + key[i + 1] + key[i] + key[i + 2 :]
    if edit == "case" and key[i].isalpha():
        return key[:i] + key[i].swapcase() + key[i + 1 :]
    return key[:i] + draw(st.sampled_from("xz_")) + key[i:]


# ---------------------------------------------------------------- the properties


@fuzz_settings()
@given(text=RAW_TEXTS)
def test_raw_text_fails_only_with_located_spec_errors(text, warm_registry):
    spec = load_text(text, warm_registry)
    count("raw_text", "loaded" if spec else "spec_error")


@fuzz_settings()
@given(tree=TREES | overridden_examples())
def test_schema_shaped_trees_fail_only_with_located_spec_errors(tree, warm_registry):
    with AUDIT.watch() as seen:
        try:
            spec = structure_spec(tree, warm_registry, file=FILE)
        except SpecError as error:
            assert_located(error, FILE)
            spec = None
        assert not seen, f"structuring a spec ran code: {seen}"
    if spec is not None:
        assert_no_coercion(tree, spec)
    text_spec = load_text(to_toml(tree), warm_registry)
    count("schema_trees", "loaded" if spec else "spec_error")
    count("schema_trees", "text_loaded" if text_spec else "text_spec_error")


@fuzz_settings()
@given(case=mutated())
def test_mutated_examples_report_the_mutated_key(case, warm_registry):
    document, kind, path = case
    spec = load_text(to_toml(document), warm_registry)
    count("mutated", f"{kind}_{'loaded' if spec else 'spec_error'}")
    if spec is not None:
        assert kind in ("drop", "exact_int"), f"a {kind} mutation at {path} loaded silently"
        assert_no_coercion(document, spec)
        return
    if kind != "drop" and path:
        problems = _problems(document, warm_registry)
        assert any(p.path == path for p in problems), f"no problem at {path}: {[str(p) for p in problems]}"


def _problems(document: dict, registry) -> tuple:
    with pytest.raises(SpecError) as caught:
        structure_spec(document, registry, file=FILE)
    return caught.value.problems


def assert_no_coercion(document: dict, spec: blockspec.ModelSpec) -> None:
    """Every value written comes back equal and of the same type (an int in a float field: equal, exact)."""
    loaded = spec_to_dict(spec)
    loaded.setdefault("init", attrs.asdict(blockspec.spec.schema.InitConfig()))  # GPT-2's default is not written
    for table, body in document.items():
        if isinstance(body, list):  # [[layers]]: the entries come back as written
            assert loaded[table] == body, f"$.{table}: wrote {body!r}, loaded {loaded[table]!r}"
            continue
        for key, written in body.items():
            if key == "use":
                assert loaded[table]["use"].rpartition(":")[2] == written.rpartition(":")[2]
                continue
            got = loaded[table][key]
            assert got == written, f"$.{table}.{key}: wrote {written!r}, loaded {got!r}"
            same_type = type(got) is type(written) or (type(written) is int and type(got) is float)
            assert same_type, f"$.{table}.{key}: wrote {type(written).__name__}, loaded {type(got).__name__}"


@fuzz_settings()
@given(data=st.binary(max_size=400) | st.text(max_size=200).map(lambda t: b"\xef\xbb\xbf" + t.encode() + b"\xc3"))
def test_any_file_bytes_fail_only_with_located_spec_errors(data, warm_registry):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "spec.toml"
        path.write_bytes(data)
        try:
            load_spec(path, warm_registry)
            count("file_bytes", "loaded")
        except SpecError as error:
            assert_located(error, str(path))
            count("file_bytes", "spec_error")


@settings(max_examples=settings.default.max_examples)
@given(case=mutated())
def test_check_command_exits_0_or_2_with_located_lines(case, warm_registry):
    document, kind, _ = case
    assume(not _huge_layer_count(document))  # building 2**63 blocks would take forever: see docs/reliability.md
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "spec.toml"
        path.write_text(to_toml(document), encoding="utf-8")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main(["check", str(path)])
    count("check_cli", f"exit_{code}")
    assert code in (0, 2), err.getvalue()
    lines = err.getvalue().splitlines()
    assert (code == 2) == bool(lines)
    assert all(line.startswith(f"blockspec: error: {path}") for line in lines), lines


def _huge_layer_count(document: dict) -> bool:
    layers = document.get("model", {}).get("n_layers")
    return type(layers) is int and layers > 64


# ---------------------------------------------------------------- the named hostile inputs

BASE = (SPECS / "gpt2-small.toml").read_text(encoding="utf-8")
DEEP = 10_000


@pytest.mark.parametrize("text", [
    BASE + "\n[x]\na = " + "[" * DEEP + "]" * DEEP,
    BASE + "\n[x]\na = " + "[\n" * DEEP + "]\n" * DEEP,
    BASE + "\n[x]\na = " + "{b = " * DEEP + "1" + "}" * DEEP,
    BASE + "\n" + "a" + ".b" * DEEP + " = 1",
    BASE + "\n[" + ".".join(["t"] * DEEP) + "]\n",
    BASE + "\n[x]\na = [" + "1,\n" * 100_000 + "]",
], ids=["arrays", "arrays-multiline", "inline-tables", "dotted-key", "table-header", "wide-array"])
def test_deep_nesting_is_a_located_spec_error(text, registry):
    with pytest.raises(SpecError) as caught:
        loads_spec(text, registry, file=FILE)
    assert_located(caught.value, FILE)
    problem = caught.value.problems[0]
    assert problem.line is not None and problem.line > BASE.count("\n"), problem


def test_nesting_just_inside_the_bound_parses_to_a_schema_error(registry):
    text = BASE + "\n[x]\na = " + "[" * MAX_NESTING + "]" * MAX_NESTING
    with pytest.raises(SpecError) as caught:
        loads_spec(text, registry, file=FILE)
    assert [p.path for p in caught.value.problems] == ["$.x"]


def test_brackets_inside_strings_and_comments_do_not_count(registry):
    text = BASE.replace('name = "gpt2-small"', 'name = "' + "[" * 100 + '"  # ' + "{" * 100)
    assert loads_spec(text, registry).model.name == "[" * 100


@pytest.mark.parametrize(("old", "new", "path"), [
    ("d_ff = 3072", "d_ff = 9223372036854775808", "$.model.d_ff"),
    ("d_ff = 3072", "d_ff = -9223372036854775809", "$.model.d_ff"),
    ("eps = 1e-5", "eps = 1e400", "$.norm.eps"),
    ("eps = 1e-5", "eps = nan", "$.norm.eps"),
    ("eps = 1e-5", "eps = 9007199254740993", "$.norm.eps"),
    ("vocab_size = 50257", "vocab_size = 9223372036854775807", "$.model.vocab_size"),
    ("context_length = 1024", "context_length = 4611686018427387904", "$.model.context_length"),
    ("d_ff = 3072", "d_ff = 4611686018427387904", "$.model.d_ff"),
])
def test_huge_numbers_are_refused_at_their_path(old, new, path, registry):
    with pytest.raises(SpecError) as caught:
        loads_spec(BASE.replace(old, new), registry, file=FILE)
    assert_located(caught.value, FILE)
    assert [p.path for p in caught.value.problems] == [path]


def test_a_huge_integer_past_pythons_digit_limit_is_a_spec_error(registry):
    text = BASE + "\n[x]\na = [" + ",\n".join(["9" * 4000 + "9" * 400] * 1) + "]"
    with pytest.raises(SpecError) as caught:
        loads_spec(text, registry, file=FILE)
    assert_located(caught.value, FILE)


def test_lines_past_the_bound_are_refused_with_their_position(registry):
    text = BASE.replace('name = "gpt2-small"', 'name = "' + "x" * MAX_LINE_CHARS + '"')
    with pytest.raises(SpecError) as caught:
        loads_spec(text, registry, file=FILE)
    problem = caught.value.problems[0]
    assert (problem.line, problem.column) == (BASE.splitlines().index('name = "gpt2-small"') + 1, MAX_LINE_CHARS + 1)


def test_non_utf8_bytes_name_their_line_and_column(tmp_path, registry):
    path = tmp_path / "latin1.toml"
    path.write_bytes(BASE.replace('name = "gpt2-small"', 'name = "gpt2-sm\xe9ll"').encode("latin-1"))
    with pytest.raises(SpecError) as caught:
        load_spec(path, registry)
    problem = caught.value.problems[0]
    line = BASE.splitlines().index('name = "gpt2-small"') + 1
    assert (problem.file, problem.line, problem.column) == (str(path), line, len('name = "gpt2-sm') + 1)
    assert "0xe9" in problem.message


def test_a_file_past_the_size_limit_is_refused_without_reading_it_all(tmp_path, registry):
    path = tmp_path / "big.toml"
    path.write_bytes(b"# " + b"x" * 100 + b"\n" * (3 << 20))
    with pytest.raises(SpecError, match="at most"):
        load_spec(path, registry)


@pytest.mark.parametrize("use", [
    "os:system", "subprocess:Popen", "builtins:eval", "os.path.join", "__import__('os').system('true')",
    "blockspec.registry.loading:load_registry", "importlib:import_module",
])
def test_a_spec_can_never_import_code(use, warm_registry):
    text = BASE.replace('use = "layernorm"', f"use = {toml_string(use)}")
    before = set(sys.modules)
    with AUDIT.watch() as seen, pytest.raises(blockspec.UnknownComponentError) as caught:
        loads_spec(text, warm_registry, file=FILE)
    assert not seen and set(sys.modules) == before
    assert caught.value.problems[0].path == "$.norm.use"


def test_code_in_a_string_value_stays_a_string(tmp_path, warm_registry):
    marker = tmp_path / "marker"
    payload = f"__import__('os').system('touch {marker}')"
    text = BASE.replace('name = "gpt2-small"', f"name = {toml_string(payload)}")
    with AUDIT.watch() as seen:
        spec = loads_spec(text, warm_registry)
    assert spec.model.name == payload and not marker.exists() and not seen


@pytest.mark.parametrize("data", [[1, 2], "model", None, 3])
def test_a_document_that_is_not_a_table_is_a_spec_error_at_the_root(data, registry):
    with pytest.raises(SpecError) as caught:
        structure_spec(data, registry, file=FILE)
    assert [p.path for p in caught.value.problems] == ["$"]
