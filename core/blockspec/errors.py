"""The library's error tree: every failure a user can cause is a BlockspecError.

Each subclass also subclasses the builtin a caller would naturally catch
(never ``KeyError``: cattrs reports a KeyError as "required field missing").

An error keeps its problems as data (``error.problems``: file, ``$.path``, expected, found,
suggestion) to the end, so a frontend can say them in its own words: the command line renders
the same problems with its flags where the library names its parameters (``render``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from attrs import evolve, field, frozen

Spelling = Mapping[str, str]  # a path or parameter name -> the words a frontend uses for it ("$.lr" -> "--lr")

# What a terminal obeys rather than shows: C0 controls (ESC, CR, backspace, NUL...), DEL, C1 controls, the
# bidi marks, embeddings, overrides and isolates, and the Unicode line and paragraph separators.
TERMINAL_CONTROLS = (*range(0x00, 0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F, *range(0x2028, 0x202F),
                     *range(0x2066, 0x206A))
_ESCAPES = {code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" for code in TERMINAL_CONTROLS}
_ESCAPES_BUT_LINES = {code: escape for code, escape in _ESCAPES.items() if code != ord("\n")}
_ESCAPES_BUT_LAYOUT = {code: escape for code, escape in _ESCAPES_BUT_LINES.items() if code != ord("\t")}


def printable(text: str, *, lines: bool = True) -> str:
    """``text`` safe to print: each character a terminal would obey is written as its escape (``\\x1b``), so
    a key, value or file name quoted from a file can neither recolour, erase, rewrite nor reorder the text
    around it. ``lines``: line breaks stay (a report may span lines); without, they are escaped too (one
    value, one line). Every other character, Unicode names included, stays as it is. Idempotent."""
    return text.translate(_ESCAPES_BUT_LINES if lines else _ESCAPES)


def printable_report(text: str) -> str:
    """``printable`` for a command's report on stdout: its layout (line breaks, tabs) stays, every other
    character a terminal would obey (a model's name from a file, generated text) is written as its escape."""
    return text.translate(_ESCAPES_BUT_LAYOUT)


@frozen(kw_only=True)
class Problem:
    """One thing wrong with one input, located as precisely as we can.

    ``path`` is a ``$.path`` inside a document, or the name of the parameter a call got wrong
    (``ids``). ``expected`` and ``found`` keep what was wanted and what came as data; ``message``
    says what is wrong (by default ``expected X, found Y`` from them). ``hint`` is the suggestion.
    ``names`` are the parameters the text mentions: ``{name}`` in message or hint stands for
    ``names[name]``, the library's spelling (``{overwrite}`` -> ``overwrite=True``); a frontend's
    spelling of the same key replaces it (``--force``).
    """

    file: str | None = None
    path: str | None = None
    line: int | None = None
    column: int | None = None
    expected: str | None = None
    found: str | None = None
    message: str = field()
    hint: str | None = None
    names: Mapping[str, str] = field(factory=dict, hash=False)

    @message.default
    def _expected_found(self) -> str:
        if self.expected is None:
            return ""
        return f"expected {printable(self.expected, lines=False)}, found {printable(str(self.found), lines=False)}"

    def __str__(self) -> str:
        return self.render()

    def render(self, spelling: Spelling | None = None) -> str:
        """One line, ``file:line: $.path: message; hint``, in ``spelling``'s words (paths and names)."""
        spelling = spelling or {}
        words = {name: spelling.get(name, said) for name, said in self.names.items()}
        place = self._place(spelling)
        what = _fill(self.message, words) or ""
        text = f"{place}: {what}" if place else what
        hint = _fill(self.hint, words)
        return printable(f"{text}; {hint}" if hint else text)

    def _place(self, spelling: Spelling) -> str:
        """``file:line:column: path``; an unnamed document is ``<spec>`` where a line or ``$.path`` points into it."""
        in_document = self.line is not None or (self.path or "").startswith("$")
        where = self.file or ("<spec>" if in_document else None)
        parts = [] if where is None else [printable(where, lines=False) + _line_column(self.line, self.column)]
        if self.path:
            parts.append(printable(spelling.get(self.path, self.path), lines=False))
        return ": ".join(parts)


def _line_column(line: int | None, column: int | None) -> str:
    if line is None:
        return ""
    return f":{line}" if column is None else f":{line}:{column}"


def _fill(text: str | None, words: Spelling) -> str | None:
    """``text`` with each ``{name}`` slot replaced by its word (a plain replacement: no other brace is read)."""
    if text is None:
        return None
    for name, word in words.items():
        text = text.replace("{" + name + "}", word)
    return text


class BlockspecError(Exception):
    """Root of every error blockspec raises on purpose.

    ``BlockspecError("text")`` is one problem with that message; ``BlockspecError(problems)`` (a
    Problem, or several) keeps each, one line each in ``str(error)``.
    """

    def __init__(self, problems: Sequence[Problem] | Problem | str = "", *args: object) -> None:
        if isinstance(problems, str):
            problems = [Problem(message=problems)] if problems else []
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__(self.render(), *args)

    def render(self, spelling: Spelling | None = None) -> str:
        """The problems, one line each, in ``spelling``'s words (a command's flags); without it, the library's."""
        return "\n".join(problem.render(spelling) for problem in self.problems)


class SpecError(BlockspecError, ValueError):
    """A spec is not valid; carries every problem found, one line each."""


class UnknownComponentError(SpecError, LookupError):
    """A spec names a component that no loaded plugin provides."""


class RegistrationError(BlockspecError, ValueError):
    """A plugin tried to register something the registry refuses."""


class PluginError(BlockspecError, RuntimeError):
    """A plugin could not be loaded (raised only in strict mode)."""


class ContextLengthError(BlockspecError, IndexError):
    """A position lies past what the positional encoder can represent."""


class InputError(BlockspecError, ValueError):
    """A model was called with input it cannot take: token ids of the wrong shape."""


class ArgumentTypeError(InputError, TypeError):
    """A library call got an argument of a type it cannot take (also a ``TypeError``); names the type."""


class TokenIdError(InputError, IndexError):
    """A token id lies outside the model's vocabulary (negative, or >= vocab_size)."""


class NonFiniteError(BlockspecError, FloatingPointError):
    """A forward pass produced NaN or Inf (inside ``blockspec.debug.check_finite``), or ``generate`` met NaN or
    Inf weights or logits.

    ``module_path`` is the first module to blame ("" for the model's own code, None for its input);
    ``spec_path`` the spec table that configured it (``$.activation``, or ``$.model`` for core modules).
    """

    def __init__(self, message: str, *, module_path: str | None = None, spec_path: str | None = None) -> None:
        super().__init__(message)
        self.module_path = module_path
        self.spec_path = spec_path


class CheckpointError(BlockspecError, ValueError):
    """A checkpoint or weights file is missing, corrupt or does not fit."""


class OutputError(CheckpointError):
    """An output cannot be written where it was asked for: it would replace what blockspec did not write,
    or the file system refused (a full disk, a read-only place); the old output is still there."""


class FieldError(ValueError):
    """Raised by config validators; names the offending field for the error path.

    ``FieldError(field, message)``, or with ``expected=``/``found=`` (and ``names=`` for the other
    fields the text mentions as ``{name}``) to keep them as data in the problem the reader reports.
    """

    def __init__(self, field: str, message: str = "", *, expected: str | None = None, found: str | None = None,
                 names: Mapping[str, str] | None = None) -> None:
        self.field = field
        problem = Problem(expected=expected, found=found, names=dict(names or {}))  # "expected X, found Y"
        self.problem = evolve(problem, message=message) if message else problem
        self.message = str(self.problem)
        super().__init__(f"{field}: {self.message}")
