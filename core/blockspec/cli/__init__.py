"""The ``blockspec`` command: subcommands in their own modules, errors as lines, never tracebacks.

Every line the command itself writes to stderr goes through ``cli.common``'s printer, which escapes the
terminal controls a file, a flag or a plugin may have put in the text (``errors.printable``)."""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
from collections.abc import Sequence

from blockspec.registry.catalogue import REGISTRY_ENV, registry_file_override
from blockspec.errors import BlockspecError, printable
from blockspec.cli.common import print_error, printable_stdout
from blockspec.cli.repeats import forget_given, register_single_actions
from blockspec.cli import (
    check_cmd,
    data_cmd,
    doctor_cmd,
    eval_cmd,
    explore_cmd,
    export_cmd,
    export_peft_cmd,
    export_weights_cmd,
    generate_cmd,
    import_cmd,
    list_cmd,
    merge_cmd,
    schema_cmd,
    show_cmd,
    sweep_cmd,
    tokenizer_cmd,
    trace_cmd,
    train_cmd,
    verify_cmd,
)

COMMANDS = (list_cmd, check_cmd, show_cmd, trace_cmd, explore_cmd, verify_cmd, import_cmd, export_cmd,
            export_weights_cmd, doctor_cmd, tokenizer_cmd, data_cmd, train_cmd, sweep_cmd, generate_cmd, eval_cmd,
            schema_cmd, merge_cmd, export_peft_cmd)
DEBUG_ENV = "BLOCKSPEC_DEBUG"


class _UsageError(Exception):
    """argparse refused the command line; main prints it like any other error."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad command line is reported as ``blockspec: error: --flag: ...`` with exit 2,
    the same as every other error, instead of a usage block and ``SystemExit``; and a flag given twice
    keeps both values or is refused, never the last alone (``cli/repeats.py``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        register_single_actions(self)

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        forget_given(namespace)
        return namespace, extras

    def error(self, message: str):
        raise _UsageError(self.prog, re.sub(r"^argument ([^:]+): ", r"\1: ", message))


REGISTRY_AFTER = "registry_after_command"
REGISTRY_HELP = f"a registry file whose [policy] selects the plugins to load (or ${REGISTRY_ENV})"


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="blockspec",
        description="Compose PyTorch transformers from TOML specs, out of plugin components.",
    )
    parser.add_argument("--version", action="version", version=version_line(),
                        help="print blockspec's, Python's and torch's versions and exit")
    parser.add_argument("--registry", metavar="FILE", help=REGISTRY_HELP)
    # the same --registry after the subcommand, under its own name (the subcommand parses apart, so the
    # repeat rule cannot see both); SUPPRESS: absent there, the value given before it stands
    shared = _Parser(add_help=False)
    shared.add_argument("--registry", metavar="FILE", dest=REGISTRY_AFTER, default=argparse.SUPPRESS,
                        help=REGISTRY_HELP)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                       parser_class=_subparser_with([shared]))
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def _subparser_with(parents: list[argparse.ArgumentParser]):
    """The subcommands' parser class: a _Parser that also takes the options every command shares."""

    def make(**kwargs) -> _Parser:
        return _Parser(**{**kwargs, "parents": [*kwargs.get("parents", ()), *parents]})

    return make


def version_line() -> str:
    """``blockspec --version``: read from the installed metadata, so torch is never imported."""
    from importlib.metadata import PackageNotFoundError, version

    def of(distribution: str) -> str:
        try:
            return version(distribution)
        except PackageNotFoundError:
            return "not installed"

    return f"blockspec {of('blockspec')} (Python {platform.python_version()}, torch {of('torch')})"


def _swallowed_values(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The flag whose single value argparse turned into a list (``--out=--``: its '--' handling), if any,
    with the command it belongs to: ``--tokenizer (see blockspec data prepare --help)``."""
    for chosen in _chosen_parsers(parser, args):
        for option in chosen._actions:
            if not option.option_strings or option.nargs is not None:
                continue
            value = getattr(args, option.dest, None)
            values = value if isinstance(option, argparse._AppendAction) and isinstance(value, list) else [value]
            if any(isinstance(v, list) for v in values):  # an appended flag's values are each one string
                return f"{option.option_strings[-1]}: expected one value, found '--' (see {chosen.prog} --help)"
    return None


def _chosen_parsers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[argparse.ArgumentParser]:
    """The parsers the command line chose below the top: the command's, and its action's (``data prepare``)."""
    chosen: list[argparse.ArgumentParser] = []
    while True:
        subparsers = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if subparsers is None or getattr(args, subparsers.dest, None) not in subparsers.choices:
            return chosen
        parser = subparsers.choices[getattr(args, subparsers.dest)]
        chosen.append(parser)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        with printable_stdout():  # reports quote files too: what a terminal would obey is escaped there as well
            return _main(argv)
    except KeyboardInterrupt as interrupted:  # anywhere, start-up included; a training run's Interrupted says
        message = str(interrupted)            # what it saved
        print("blockspec: interrupted" + (f": {message}" if message else ""), file=sys.stderr)
        return 130


def _main(argv: Sequence[str] | None) -> int:
    parser = make_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as error:
        print_error(f"{error} (see {error.prog} --help)")
        return 2
    except SystemExit as done:  # --help, --version: printed; a return code, not an exception, for callers of main
        return done.code if isinstance(done.code, int) else 0
    if hasattr(args, REGISTRY_AFTER):
        after = vars(args).pop(REGISTRY_AFTER)
        if args.registry is not None:
            print_error(f"--registry given twice: {args.registry} and {after} (see blockspec --help)")
            return 2
        args.registry = after
    unparsed = _swallowed_values(parser, args)
    if unparsed is not None:
        print_error(unparsed)
        return 2
    nul = next((v for v in vars(args).values() for v in (v if isinstance(v, list) else [v])
                if isinstance(v, str) and "\x00" in v), None)
    if nul is not None:  # the OS refuses such a path with a ValueError; say it here, once, for every command
        print_error(f"{nul!r:.80}: contains a NUL character, which no path or value may hold")
        return 2
    try:
        with registry_file_override(args.registry):
            return args.run(args)
    except BlockspecError as error:
        print_error(error)
        return 2
    except BrokenPipeError:
        return 0
    except OSError as error:  # the file system refused a named file (writers say more: outputs/failures.py)
        if error.filename is None:
            return _internal_error(error)
        print_error(f"{os.fsdecode(error.filename)}: {error.strerror or error}")
        return 2
    except Exception as error:  # last resort: one line, the traceback only on request
        return _internal_error(error)


def _internal_error(error: Exception) -> int:
    if os.environ.get(DEBUG_ENV):
        raise error
    print(printable(f"blockspec: internal error: {type(error).__name__}: {error} "
                    f"(set {DEBUG_ENV}=1 for the traceback, and please report it)", lines=False), file=sys.stderr)
    return 1
