"""`blockspec eval SOURCE --tasks T1,T2`: lm-evaluation-harness tasks on any model source, the harness's table out.

The flags and the run for the ``eval`` command to call; the harness is optional, so it is imported here
only when tasks are asked for, and its absence is one line naming the extra that installs it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from blockspec.cli.common import UsageError, emit_json, flag_names, positive_int, resolve_device

FLAGS = {"tasks": "--tasks", "batch_size": "--batch-size", "max_gen_toks": "--max-gen-toks"}
RESULT_KEYS = ("results", "groups", "versions", "n-shot", "n-samples", "higher_is_better")  # what --json keeps


def add_task_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=_task_names, metavar="T1,T2",
                        help="lm-evaluation-harness tasks to run, comma-separated (needs blockspec[eval])")
    parser.add_argument("--include-path", metavar="DIR",
                        help="a folder of the harness's task YAML files, for tasks of your own (local data files "
                             "work offline)")
    parser.add_argument("--limit", type=positive_int, metavar="N", help="score only the first N documents of each "
                        "task (a quick check; the harness's figures are then not comparable)")


def run_tasks(args: argparse.Namespace) -> int:
    """Run ``args.tasks`` on ``args.source``; the harness's table (or, with ``--json``, its results) on stdout."""
    harness = _harness()
    device = None if args.device is None else resolve_device(args.device)
    with flag_names(FLAGS):
        results = harness.evaluate_tasks(args.source, list(args.tasks), include_path=args.include_path, limit=args.limit,
                                         batch_size=args.batch_size or 1, device=device)
    if args.json:
        emit_json(_plain({key: results[key] for key in RESULT_KEYS if key in results}))
    else:
        print(harness.results_table(results))
    return 0


def _harness() -> Any:
    try:
        from blockspec.evaluate import harness
    except ModuleNotFoundError as missing:
        if missing.name != "lm_eval":
            raise
        raise UsageError(f"--tasks: {missing.msg}") from None
    return harness


def _task_names(text: str) -> tuple[str, ...]:
    """A tuple, not a list: a flag's single value that is a list is what argparse's '--' handling leaves."""
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected task names separated by commas, found {text!r}")
    return names


def _plain(data: dict[str, Any]) -> Any:
    """The harness's numbers as JSON has them (it keeps numpy scalars and, for a missing stderr, the text N/A)."""
    from lm_eval.utils import handle_non_serializable

    return json.loads(json.dumps(data, default=handle_non_serializable))
