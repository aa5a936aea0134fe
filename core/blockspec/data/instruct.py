"""Instruction data: JSON lines of a prompt and a response, and which of their tokens the loss scores.

Each line of a ``.jsonl`` file is one JSON object; its prompt and its response (two keys, both strings) become
the prompt's tokens, the response's, then what ends a document (``prepared.separator``: the tokenizer's
end-of-text token). The loss scores the response and that end, so the model learns to answer and to stop,
not to write prompts. Prompt and response are encoded apart: the boundary between them is a token boundary
whatever the tokenizer would merge across it.

A template shapes the text around them: ``{prompt}`` and ``{response}``, once each, the prompt first.
Everything up to ``{response}`` is the prompt's side; the response and any text after it are scored. The
fields are cut out of the template, never formatted: nothing is evaluated, and a value that holds the
text ``{response}`` stays that text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

from attrs import frozen

from blockspec.data.dataset import DataError
from blockspec.data.textfiles import check_distinct, chunks
from blockspec.data.tokenizer import CharTokenizer
from blockspec.errors import InputError, Problem

PROMPT_FIELD, RESPONSE_FIELD = "{prompt}", "{response}"
WANTED = "JSON lines, each an object with a prompt and a response"


@frozen
class Template:
    """The text around a prompt and its response: ``before{prompt}between{response}after``."""

    before: str = ""
    between: str = ""
    after: str = ""

    def sides(self, prompt: str, response: str) -> tuple[str, str]:
        """(the unscored text, the scored text) of one example."""
        return self.before + prompt + self.between, response + self.after

    @property
    def text(self) -> str:
        return self.before + PROMPT_FIELD + self.between + RESPONSE_FIELD + self.after


def parse_template(text: str) -> Template:
    """A template holding ``{prompt}`` then ``{response}``, each once; anything else is refused in one line."""
    counts = {field: text.count(field) for field in (PROMPT_FIELD, RESPONSE_FIELD)}
    if any(count != 1 for count in counts.values()) or text.index(PROMPT_FIELD) > text.index(RESPONSE_FIELD):
        found = (", ".join(f"{field} {count} times" for field, count in counts.items())
                 if any(count != 1 for count in counts.values()) else f"{RESPONSE_FIELD} first")
        raise InputError(Problem(path="template", expected=f"a text holding {PROMPT_FIELD} and then "
                                 f"{RESPONSE_FIELD}, once each", found=f"{text!r} ({found})",
                                 hint=r"for example '### Question:\n{prompt}\n### Answer:\n{response}'"))
    before, rest = text.split(PROMPT_FIELD)
    between, after = rest.split(RESPONSE_FIELD)
    return Template(before, between, after)


@frozen
class Keys:
    """The JSON keys of the prompt and the response."""

    prompt: str = "prompt"
    response: str = "response"


@frozen
class Example:
    prompt: str
    response: str
    file: str
    line: int
    bytes: int  # of its JSON line: what progress counts


def examples(path: str | Path, keys: Keys) -> Iterator[Example]:
    """The examples of one file, line by line (constant memory); a bad line is refused as FILE:LINE."""
    number = 0
    for number, line in _lines(path):
        if line.strip():
            yield _example(line, keys, file=str(path), line=number)


def check_examples(paths: Sequence[str | Path], keys: Keys) -> int:
    """Read every line of every file, so that a bad one is refused before any work; returns the examples."""
    check_distinct(paths)
    counts = [sum(1 for _ in examples(path, keys)) for path in paths]
    for path, count in zip(paths, counts):
        if count == 0:
            raise DataError(Problem(file=str(path), expected=WANTED, found="blank lines only"))
    if sum(counts) < 2:
        raise DataError(Problem(file=str(paths[0]), message="holds 1 example; the training and the validation "
                                "split need one each at least", hint="give more examples"))
    return sum(counts)


def char_tokenizer(paths: Sequence[str | Path], keys: Keys, template: Template, end: str) -> CharTokenizer:
    """The sorted set of the characters of every example's text, the template's and ``end`` (what ends one)."""
    seen = set(template.text.replace(PROMPT_FIELD, "").replace(RESPONSE_FIELD, "")) | set(end)
    for path in paths:
        for example in examples(path, keys):
            seen.update(example.prompt, example.response)
    return CharTokenizer("".join(sorted(seen)))


def _lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a UTF-8 file read in pieces; ``chunks`` refuses a missing, empty or non-UTF-8 one."""
    pending, number = "", 0
    for piece in chunks(path, wanted=WANTED):
        lines = (pending + piece).split("\n")
        pending = lines.pop()  # a piece ends at a line break, or inside a huge line
        for line in lines:
            number += 1
            yield number, line
    if pending:
        yield number + 1, pending


def _example(text: str, keys: Keys, *, file: str, line: int) -> Example:
    """One line's prompt and response, or a one-line refusal naming FILE:LINE and what it holds."""
    try:
        value = json.loads(text)
    except ValueError as error:
        found = f"{_short(text)} ({error})"
        raise DataError(Problem(file=file, line=line, expected="a JSON object", found=found)) from None
    if not isinstance(value, dict):
        raise DataError(Problem(file=file, line=line, expected="a JSON object", found=_json_type(value)))
    texts = []
    for role, key in (("prompt", keys.prompt), ("response", keys.response)):
        if key not in value:
            raise DataError(Problem(file=file, line=line, message=f"has no key {key!r} (the {role}); its keys: "
                                    f"{', '.join(map(repr, value)) or 'none'}",
                                    hint=f"name the {role}'s key with --{role}-key"))
        if not isinstance(value[key], str):
            raise DataError(Problem(file=file, line=line, expected=f"a string at {key!r} (the {role})",
                                    found=_json_type(value[key])))
        texts.append(value[key])
    return Example(texts[0], texts[1], file=file, line=line, bytes=len(text.encode("utf-8")) + 1)


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _short(line: str, width: int = 40) -> str:
    text = line.strip()
    return repr(text if len(text) <= width else text[:width] + "...")
