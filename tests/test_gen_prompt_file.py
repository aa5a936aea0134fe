"""Issue 25, ``--prompt-file``: one prompt per line, as if each were a ``--prompt``; an empty line is refused."""

from __future__ import annotations

import json

import pytest

from .test_gen_stops import make_tiny, run

pytest.importorskip("tokenizers")
pytestmark = pytest.mark.usefixtures("one_thread")
PROMPTS = ["the", "and so it", "é, 中"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, registry):
    return make_tiny(tmp_path_factory.mktemp("prompt-file"), registry)


def generated(capsys, tiny, *flags) -> list[dict]:
    code, out, err = run(capsys, "generate", tiny["root"] / "ckpt", *flags, "--max-new-tokens", "6", "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("separator, ending", [("\n", "\n"), ("\r\n", "\r\n"), ("\n", "")])
def test_a_prompt_file_continues_each_line_as_its_prompt_flag_does(tiny, capsys, tmp_path, separator, ending):
    path = tmp_path / "prompts.txt"
    path.write_bytes((separator.join(PROMPTS) + ending).encode())
    by_file = generated(capsys, tiny, "--prompt-file", path)
    by_flags = generated(capsys, tiny, *[arg for prompt in PROMPTS for arg in ("--prompt", prompt)])
    assert [r["prompt"] for r in by_file] == PROMPTS and by_file == by_flags


@pytest.mark.parametrize("content, message", [
    (b"the\n\nand\n", "prompts.txt:2: is an empty line; expected a prompt of at least one character"),
    (b"the\n\n", "prompts.txt:2: is an empty line"),
    (b"", "prompts.txt: is empty; expected a prompt of at least one character"),
    (b"the\n\xff\n", "prompts.txt: is not UTF-8 text: byte 4"),
])
def test_a_bad_prompt_file_is_one_line_before_any_work(tiny, capsys, tmp_path, content, message):
    path = tmp_path / "prompts.txt"
    path.write_bytes(content)
    code, out, err = run(capsys, "generate", tiny["root"] / "ckpt", "--prompt-file", path)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and not out


def test_a_prompt_file_and_a_prompt_flag_are_one_choice(tiny, capsys, tmp_path):
    code, _, err = run(capsys, "generate", tiny["root"] / "ckpt", "--prompt-file", tmp_path / "p", "--prompt", "x")
    assert code == 2 and "not allowed with argument" in err
