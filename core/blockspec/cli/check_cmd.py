"""`blockspec check`: validate specs (and build them on the meta device); exit 2 on any problem."""

from __future__ import annotations

import argparse

from attrs import evolve

from blockspec.assembly.counting import count_parameters
from blockspec.errors import BlockspecError, Problem
from blockspec.sources import open_source
from blockspec.cli.common import add_json_argument, emit_json, print_error, registry_with_warnings


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("check", help="validate spec files")
    parser.add_argument("specs", nargs="+", metavar="SPEC", help="TOML spec file, checkpoint or Hugging Face directory")
    add_json_argument(parser, "a JSON array, one object per spec: file, ok, name, parameters, problems")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    registry = registry_with_warnings(probe=True)  # check imports torch anyway; the probe adds ~0.1 s
    reports = []
    for path in args.specs:
        try:
            spec = open_source(path, registry).spec
            count = count_parameters(spec, registry)
        except BlockspecError as error:  # a spec's problems, or a checkpoint's (a lock naming a missing plugin)
            problems = [_located(problem, path) for problem in error.problems]
            for problem in problems:  # stderr either way: --json keeps stdout for the report
                print_error(problem)
            reports.append({"file": str(path), "ok": False, "name": None, "parameters": None,
                            "problems": [_problem_json(p) for p in problems]})
            continue
        reports.append({"file": str(path), "ok": True, "name": spec.model.name, "parameters": count.exact,
                        "problems": []})
        if not args.json:
            print(f"ok  {path}  ({spec.model.name}: {count.exact:,} parameters)")
    if args.json:
        emit_json(reports)
    return 0 if all(r["ok"] for r in reports) else 2


def _located(problem: Problem, path: str) -> Problem:
    """The problem with its file: the one it names, else ``path`` where its text does not name it already."""
    if problem.file is not None or path in problem.message:
        return problem
    return evolve(problem, file=path)


def _problem_json(problem: Problem) -> dict:
    return {"file": problem.file, "line": problem.line, "column": problem.column, "path": problem.path,
            "message": problem.message, "hint": problem.hint}
