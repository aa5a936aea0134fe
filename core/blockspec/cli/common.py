"""Helpers shared by subcommands: the registry with visible warnings, tables, JSON, and the
argument types, ``--device`` and ``--plot`` that every command spells and checks the same way."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blockspec.errors import TERMINAL_CONTROLS, BlockspecError, OutputError, printable, printable_report
from blockspec.outputs.kinds import OutputKind
from blockspec.outputs.targets import check_writable_target
from blockspec.registry.components import Registry
from blockspec.registry.loading import PluginWarning, load_registry
from blockspec.generation.bounds import MAX_ADDITIVE_PENALTY, MAX_NEW_TOKENS, MAX_REPETITION_PENALTY, MAX_SAMPLES
from blockspec.train.seeds import SEEDS

if TYPE_CHECKING:
    import torch

DEVICES = ("auto", "cpu", "cuda", "cuda:N", "mps")
PLOT_FORMATS = (".png", ".svg", ".pdf")


class UsageError(BlockspecError, ValueError):
    """A command-line value the command cannot use (a device this machine lacks, a plot file it cannot write)."""


def registry_with_warnings(*, probe: bool | None = None) -> Registry:
    """Load plugins; each quarantined one (or policy typo) becomes one warning line on stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PluginWarning)
        registry = load_registry(probe=probe)
    for warning in caught:
        if issubclass(warning.category, PluginWarning):
            print_warning(warning.message)
        else:  # not ours: hand it back to the warnings machinery unchanged
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return registry


class PrintableOutput:
    """A command's stdout: each write passes through ``printable_report``, so what a file said (a spec's name
    in ``show`` or ``check``, a tokenizer's text in ``generate``) cannot drive the terminal; the rest is the
    stream's own."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(printable_report(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextmanager
def printable_stdout() -> Iterator[None]:
    """Within the block, ``sys.stdout`` is a ``PrintableOutput`` of what it was (restored after)."""
    original = sys.stdout
    sys.stdout = PrintableOutput(original)
    try:
        yield
    finally:
        sys.stdout = original


def print_error(message: object) -> None:
    """An error on stderr, every line prefixed: a report of several located problems keeps one per line,
    and a line break inside a value (a file name) cannot start a line without the prefix."""
    _print_prefixed("error", message)


def print_warning(message: object) -> None:
    """A warning on stderr, as safe to print as an error (a quarantined plugin's message quotes its exception)."""
    _print_prefixed("warning", message)


def print_note(message: object) -> None:
    """A note on stderr (what a run measured, beside its output on stdout), escaped as errors are."""
    _print_prefixed("note", message)


def _print_prefixed(level: str, message: object) -> None:
    """The one printer of the command's own messages: terminal controls from a file or a plugin are escaped
    (``printable``) before anything reaches the terminal, whoever built the text."""
    for line in printable(str(message)).split("\n"):
        print(f"blockspec: {level}: {line}", file=sys.stderr)


# -- output ------------------------------------------------------------------------------------------------


def add_json_argument(parser: argparse.ArgumentParser, what: str = "a JSON object") -> None:
    """``--json``; ``what`` says what the document holds (and what the command then leaves out)."""
    parser.add_argument("--json", action="store_true", help=f"print JSON instead of text: {what}")


# JSON escapes C0 in its strings itself (and its own line breaks lie between values); the rest it writes raw.
_JSON_ESCAPES = {code: f"\\u{code:04x}" for code in TERMINAL_CONTROLS if code >= 0x7F}


def emit_json(data: Any) -> None:
    """Every command's ``--json`` output: one document on stdout, indented by 2, keys in the order built.
    A terminal control from a file is written as its JSON escape (the same value), names in any script as text."""
    print(json.dumps(data, indent=2, ensure_ascii=False).translate(_JSON_ESCAPES), flush=True)


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()) -> None:
    """Plain aligned columns; ``right`` lists the columns to right-align (numbers)."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def fmt(row: Sequence[str]) -> str:
        cells = [str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        return "  ".join(cells).rstrip()

    print(fmt(header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(fmt(row))


# -- argument types (argparse reports a bad value as a usage error, exit 2) -------------------------------


MAX_THREADS = 1024
MAX_BATCH = 2**20  # windows per step: more is a typo (with --no-memory-check, it would size the batch unchecked)


def _number_type(name: str, parse: Callable[[str], float | None], accept: Callable[[float], bool],
                 expected: str) -> Callable[[str], Any]:
    """An argparse ``type``: ``parse`` the text (None: not a number), then ``accept`` it or say what was expected."""
    def convert(text: str) -> Any:
        value = parse(text)
        if value is None or not accept(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, found {text!r:.40}")
        return value

    convert.__name__ = convert.__qualname__ = name
    return convert


positive_int = _number_type("positive_int", lambda t: _int(t), lambda v: v >= 1, "a positive integer")
non_negative_int = _number_type("non_negative_int", lambda t: _int(t), lambda v: v >= 0, "an integer >= 0")
seed_int = _number_type("seed_int", lambda t: _int(t), lambda v: SEEDS[0] <= v <= SEEDS[1],
                        f"an integer from {SEEDS[0]} to {SEEDS[1]}")
new_token_count = _number_type("new_token_count", lambda t: _int(t), lambda v: 0 <= v <= MAX_NEW_TOKENS,
                               f"an integer from 0 to {MAX_NEW_TOKENS:_}")
sample_count = _number_type("sample_count", lambda t: _int(t), lambda v: 1 <= v <= MAX_SAMPLES,
                            f"an integer from 1 to {MAX_SAMPLES:_}")
batch_count = _number_type("batch_count", lambda t: _int(t), lambda v: 1 <= v <= MAX_BATCH,
                           f"an integer from 1 to {MAX_BATCH:_}")
thread_count = _number_type("thread_count", lambda t: _int(t), lambda v: 1 <= v <= MAX_THREADS,
                            f"an integer from 1 to {MAX_THREADS}")  # torch's pools take no more
positive_float = _number_type("positive_float", lambda t: _float(t), lambda v: v > 0, "a number > 0")
non_negative_float = _number_type("non_negative_float", lambda t: _float(t), lambda v: v >= 0, "a number >= 0")
top_p_fraction = _number_type("top_p_fraction", lambda t: _float(t), lambda v: 0 < v <= 1, "a number in (0, 1]")
min_p_fraction = _number_type("min_p_fraction", lambda t: _float(t), lambda v: 0 <= v <= 1, "a number in [0, 1]")
repetition_penalty_float = _number_type(
    "repetition_penalty_float", lambda t: _float(t), lambda v: 0 < v <= MAX_REPETITION_PENALTY,
    f"a number > 0 and <= {MAX_REPETITION_PENALTY:g} (1: off)")
additive_penalty_float = _number_type(
    "additive_penalty_float", lambda t: _float(t), lambda v: -MAX_ADDITIVE_PENALTY <= v <= MAX_ADDITIVE_PENALTY,
    f"a number from -{MAX_ADDITIVE_PENALTY:g} to {MAX_ADDITIVE_PENALTY:g} (0: off)")


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# -- --device ----------------------------------------------------------------------------------------------


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", metavar="DEVICE",
                        help="auto (cuda if available, else mps if available, else cpu), cpu, cuda, cuda:N "
                             "or mps (default auto)")


def resolve_device(request: str) -> torch.device:
    """``--device``'s value as a torch device this machine has; anything else is a UsageError naming the flag."""
    import torch

    text = request.strip().lower()
    cuda, mps = torch.cuda.is_available(), _mps_available()
    if text == "auto":
        return torch.device("cuda" if cuda else "mps" if mps else "cpu")
    match = re.fullmatch(r"(cpu|cuda|mps)(?::(\d+))?", text)
    if match is None or (match[1] != "cuda" and match[2] is not None):
        raise UsageError(f"--device: expected one of {', '.join(DEVICES)}, found {request!r}")
    kind, index = match[1], match[2]
    if kind == "cuda":
        if not cuda:
            raise UsageError(f"--device: {request!r} asked for, but torch sees no CUDA device; "
                             "use --device cpu (or auto)")
        if index is not None and int(index) >= torch.cuda.device_count():
            raise UsageError(f"--device: {request!r} asked for, but torch sees {torch.cuda.device_count()} "
                             "CUDA device(s), numbered from 0")
        return torch.device(text)
    if kind == "mps" and not mps:
        raise UsageError(f"--device: {request!r} asked for, but torch sees no MPS device; "
                         "use --device cpu (or auto)")
    return torch.device(kind)


def _mps_available() -> bool:
    import torch

    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


# -- --plot ------------------------------------------------------------------------------------------------


def add_plot_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--plot", metavar="FILE",
                        help=f"{what}; the suffix picks the format: {', '.join(PLOT_FORMATS)} "
                             "(needs matplotlib: pip install 'blockspec[plot]')")


def check_plot_file(path: str | None) -> Path | None:
    """``--plot FILE`` checked before any work: a known suffix, an existing folder, matplotlib importable."""
    if path is None:
        return None
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"--plot: {path} is a folder; give a file name such as {target / 'plot.png'}")
    if target.suffix.lower() not in PLOT_FORMATS:
        raise UsageError(f"--plot: expected a file ending in {', '.join(PLOT_FORMATS)}, found {path!r}")
    check_output_folder("--plot", path)
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--plot: needs matplotlib, which is not installed: pip install 'blockspec[plot]'")
    return target


def check_output_folder(flag: str, path: str | Path) -> None:
    """A file output's folder must exist: a misspelt folder is refused, not created."""
    parent = Path(path).parent
    existing = next(p for p in (parent, *parent.parents) if p.exists() or p == Path(p.anchor or "."))
    if existing.exists() and not existing.is_dir():
        raise UsageError(f"{flag}: {path}: {str(existing)!r} is not a folder")
    if not parent.is_dir():
        raise UsageError(f"{flag}: {path}: the folder {str(parent)!r} does not exist; create it first")


# -- outputs: --force ----------------------------------------------------------------------------------------


FORCE = {"overwrite": "--force"}  # what the output policy's refusal names, as this flag


def check_output(flag: str, path: str | Path, *, kind: OutputKind, force: bool,
                 inputs: Sequence[str | Path | None] = ()) -> Path:
    """The file ``flag`` names, checked before any work by the one output policy (``outputs.targets``): in an
    existing folder; an existing output of ``kind`` is replaced only with ``--force``, anything else never;
    refusals name ``flag``."""
    check_output_folder(flag, path)
    try:
        with flag_names(FORCE):
            return check_writable_target(path, kind=kind, overwrite=force, inputs=inputs)
    except OutputError as error:
        raise UsageError(f"{flag}: {error}") from None


# -- out of memory -----------------------------------------------------------------------------------------


MEMORY_FLAGS = {"memory_check": "--no-memory-check"}  # what the library's refusal names, as this flag


def add_memory_check_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-memory-check``: the one way every command that allocates a model skips the estimate's refusal."""
    parser.add_argument("--no-memory-check", action="store_true",
                        help="do not refuse a run whose estimated memory exceeds what the machine has "
                             "(docs/reliability.md)")


@contextmanager
def memory_limit(flags: str) -> Iterator[None]:
    """An allocation the machine cannot make (CPU or GPU) is a value the user chose too large: one line
    naming the ``flags`` that size it, not an internal error."""
    try:
        yield
    except MemoryError:
        raise UsageError(f"out of memory; use smaller {flags}") from None
    except RuntimeError as error:  # torch.OutOfMemoryError (GPU) and the CPU allocator's failure are RuntimeErrors
        text = str(error)
        if "out of memory" not in text.lower() and "can't allocate memory" not in text:
            raise
        asked = re.search(r"tried to allocate ([\d.]+ ?[KMGTP]?i?B|\d+ bytes)", text)
        detail = f" (tried to allocate {asked[1]})" if asked else ""
        raise UsageError(f"out of memory{detail}; use smaller {flags}") from None


# -- library errors name parameters; the command line names flags ----------------------------------------


@contextmanager
def flag_names(flags: Mapping[str, str]) -> Iterator[None]:
    """A library error raised inside the block, said with this command's flags.

    ``flags`` maps what a problem carries as data, its ``$.path`` or parameter (``"$.lr"``, ``"ids"``)
    or a name its text mentions (``"overwrite"``), to the flag that sets it (``"--force"``). The
    error keeps its class and its problems; only its text is rendered again from them.
    """
    try:
        yield
    except BlockspecError as error:
        error.args = (error.render(flags), *error.args[1:])
        raise
