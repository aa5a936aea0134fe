"""The library's error tree: every failure a user can cause is a BlockspecError.

Each subclass also subclasses the builtin a caller would naturally catch
(never ``KeyError``: cattrs reports a KeyError as "required field missing").
"""

from __future__ import annotations

from collections.abc import Sequence

from attrs import frozen


@frozen(kw_only=True)
class Problem:
    """One thing wrong with one input, located as precisely as we can."""

    message: str
    file: str | None = None
    path: str | None = None  # JSONPath-like, e.g. "$.model.n_heads"
    line: int | None = None
    column: int | None = None
    hint: str | None = None

    def __str__(self) -> str:
        where = self.file or "<spec>"
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        parts = [where]
        if self.path:
            parts.append(self.path)
        text = ": ".join(parts) + f": {self.message}"
        return f"{text}; {self.hint}" if self.hint else text


class BlockspecError(Exception):
    """Root of every error blockspec raises on purpose."""


class SpecError(BlockspecError, ValueError):
    """A spec is not valid; carries every problem found, one line each."""

    def __init__(self, problems: Sequence[Problem] | Problem | str) -> None:
        if isinstance(problems, str):
            problems = [Problem(message=problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


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


class TokenIdError(InputError, IndexError):
    """A token id lies outside the model's vocabulary (negative, or >= vocab_size)."""


class NonFiniteError(BlockspecError, FloatingPointError):
    """A forward pass produced NaN or Inf (raised only inside ``blockspec.debug.check_finite``).

    ``module_path`` is the first module to blame ("" for the model's own code, None for its input);
    ``spec_path`` the spec table that configured it (``$.activation``, or ``$.model`` for core modules).
    """

    def __init__(self, message: str, *, module_path: str | None = None, spec_path: str | None = None) -> None:
        super().__init__(message)
        self.module_path = module_path
        self.spec_path = spec_path


class CheckpointError(BlockspecError, ValueError):
    """A checkpoint or weights file is missing, corrupt or does not fit."""


class FieldError(ValueError):
    """Raised by config validators; names the offending field for the error path."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")
