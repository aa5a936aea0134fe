"""What README.md and docs/ state about the project holds: counts from the catalogue, every command
in the README's table, the set-up installing every first-party plugin, the `[[layers]]` export rule
and the example data's source."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

import blockspec
from blockspec.cli import make_parser
from blockspec.errors import CheckpointError
from blockspec.interop import export_hf
from blockspec.interop.families import FAMILIES

from .corpus import shakespeare_path
from .specs import spec_text

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = {path.name: path.read_text(encoding="utf-8") for path in (ROOT / "docs").glob("*.md")}
CATALOGUE = tomllib.loads((ROOT / "registry.toml").read_text(encoding="utf-8"))["distributions"]
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
           "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
           "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20}


def stated_counts(noun: str) -> list[tuple[str, int]]:
    """Every "<number word> <noun>" in README.md and docs/*.md, as (page, number)."""
    pattern = re.compile(rf"\b({'|'.join(NUMBERS)})\s+{noun}", re.IGNORECASE)
    pages = {"README.md": README, **{f"docs/{name}": text for name, text in DOCS.items()}}
    return [(page, NUMBERS[m.group(1).lower()]) for page, text in pages.items() for m in pattern.finditer(text)]


def test_every_stated_count_of_first_party_plugins_is_the_catalogues():
    counts = stated_counts(r"first-party\s+plugins")
    assert counts, "the README says how many first-party plugins there are"
    assert all(n == len(CATALOGUE) for _, n in counts), (counts, sorted(CATALOGUE))


def test_every_stated_count_of_hugging_face_families_is_the_interop_modules():
    counts = stated_counts(r"(Hugging\s+Face\s+)?families")
    assert counts
    assert all(n == len(FAMILIES) for _, n in counts), (counts, [f.name for f in FAMILIES])


def test_the_run_it_set_up_installs_every_first_party_plugin():
    command = next(line for line in README.splitlines() if line.startswith("python3 -m venv .venv && "))
    installed = set(re.findall(r"\bplugins/\w+", command))
    assert installed == {entry["path"] for entry in CATALOGUE.values()}


def test_the_layout_names_every_first_party_distribution():
    line = next(line for line in README.splitlines() if line.startswith("plugins/ "))
    assert set(re.findall(r"blockspec-[\w-]+", line)) == set(CATALOGUE)


def readme_table_commands() -> set[str]:
    """The commands the README's command table names: `blockspec NAME [ACTION]` in its first column."""
    table = README.split("### The command line", 1)[1].split("\n\n", 2)[1]
    return {" ".join(m.groups(default="")).strip()
            for m in re.finditer(r"`(?:blockspec )?([\w-]+)(?: ([a-z]+))?[^`]*`", table)}


def cli_commands() -> set[str]:
    """Every command of `blockspec --help`, with its actions (`tokenizer train`, `data prepare`)."""
    parser = make_parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]
    found = set()
    for name, sub in commands.choices.items():
        actions = [a for a in sub._actions if a.dest == "action"]
        found |= {f"{name} {action}" for action in actions[0].choices} if actions else {name}
    return found


def test_every_command_is_in_the_readmes_command_table():
    missing = sorted(cli_commands() - readme_table_commands())
    assert not missing, f"README.md's command table lacks {missing}"


def test_the_readme_says_what_train_trains_on():
    row = next(line for line in README.splitlines() if line.startswith("| `blockspec train "))
    assert "character-level |" not in row and "prepared" in row


# -- the [[layers]] export rule, as README.md and docs/interop.md state it -------------------------

GEMMA_STYLE = """[model]
name = "tiny-gemma-2"
vocab_size = 96
context_length = 32
d_model = 32
n_layers = 4
n_heads = 4
n_kv_heads = 2
head_dim = 16
d_ff = 64
bias = false
embedding_scale = "sqrt_d"

[block]
use = "sandwich"

[attention]
use = "causal"
sliding_window = 8
logit_softcap = 50.0
query_scale = 0.25

[[layers]]
every = 2
offset = 1
attention = { use = "causal", logit_softcap = 50.0, query_scale = 0.25 }

[positional]
use = "rope"

[norm]
use = "rmsnorm"
eps = 1e-6
offset = true

[activation]
use = "geglu"
approximate = "tanh"

[head]
use = "lm"
tied = true
logit_softcap = 30.0
"""

LLAMA_STYLE = spec_text(name="tiny-llama", vocab_size=96, context_length=32, d_model=32, n_layers=4, n_heads=4,
                        d_ff=64, bias=False, positional="rope", norm="rmsnorm", activation="swiglu", tied=False)


def test_the_export_rule_is_stated_as_it_is():
    assert "export refuses specs with `[[layers]]`" not in README
    assert "`[[layers]]` that change only the attention's `sliding_window`" in README


def test_layers_that_vary_only_the_window_export(tmp_path, registry):
    model = blockspec.build(blockspec.loads_spec(GEMMA_STYLE, registry), registry=registry, seed=0)
    export_hf(model, tmp_path / "out")
    config = json.loads((tmp_path / "out/config.json").read_text())
    assert config["architectures"] == ["Gemma2ForCausalLM"] and config["sliding_window"] == 8


@pytest.mark.parametrize("entry", [
    "[[layers]]\nfrom = 2\npositional = { base = 1000000.0 }\n",       # another RoPE base on some layers
    "[[layers]]\nindex = [1]\nnorm = { eps = 1e-3 }\n",                  # another norm on one layer
    "[[layers]]\nfrom = 2\nffn = { use = \"moe\", n_experts = 4, top_k = 2 }\n",  # MoE on some layers
], ids=["rope-base", "norm", "moe"])
def test_layers_that_vary_anything_else_are_refused_naming_the_layer(entry, tmp_path, registry):
    model = blockspec.build(blockspec.loads_spec(LLAMA_STYLE + entry, registry), registry=registry, seed=0)
    with pytest.raises(CheckpointError, match=r"\[\[layers\]\]: layer \d differs"):
        export_hf(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- the example data ------------------------------------------------------------------------------

def test_the_readme_says_where_the_example_data_comes_from():
    words = " ".join(README.split())
    assert "karpathy/char-rnn" in words and "tinyshakespeare/input.txt" in words
    assert "1,115,394 characters, 65 distinct" in words and "`tinyshakespeare.txt`" in words


@pytest.mark.skipif(shakespeare_path() is None, reason="Tiny Shakespeare is not beside the clone")
def test_the_stated_size_of_the_data_is_the_files():
    text = shakespeare_path().read_text(encoding="utf-8")
    assert (len(text), len(set(text))) == (1_115_394, 65)


# -- every flag the docs give a command is one it takes ----------------------------------------------

def command_flags() -> dict[str, set[str]]:
    """Each command (and `tokenizer train`, `data prepare`) with the option strings its parser takes."""
    parser = make_parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]
    found = {}
    for name, sub in commands.choices.items():
        actions = [a for a in sub._actions if a.dest == "action"]
        for key, each in ({f"{name} {a}": p for a, p in actions[0].choices.items()} if actions else {name: sub}).items():
            found[key] = {option for action in each._actions for option in action.option_strings}
    return found


def documented_invocations() -> list[tuple[str, str, str]]:
    """(page, command, text) for every `blockspec CMD ...` in a code block line or an inline code span."""
    pages = {"README.md": README, **{f"docs/{name}": text for name, text in DOCS.items()}}
    pattern = re.compile(r"(?:^|`|\$ |\s)blockspec ((?:[a-z][\w-]*)(?: (?:train|prepare))?)\b([^`\n]*)", re.MULTILINE)
    known = command_flags()
    return [(page, m.group(1) if m.group(1) in known else m.group(1).split()[0], m.group(2))
            for page, text in pages.items() for m in pattern.finditer(text)
            if m.group(1) in known or m.group(1).split()[0] in known]


def test_every_flag_the_docs_give_a_command_is_one_it_takes():
    known = command_flags()
    wrong = sorted({(page, command, flag) for page, command, text in documented_invocations()
                    for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", text.split("#")[0])
                    if flag not in known[command] | {"--help"}})
    assert not wrong, wrong


def test_the_flag_check_reads_the_docs():
    invocations = documented_invocations()
    assert {"train", "generate", "tokenizer train", "data prepare", "sweep", "trace"} <= {c for _, c, _ in invocations}
