"""`blockspec trace`: follow one input through a model and name every stage's shape and maker."""

from __future__ import annotations

import argparse
import fnmatch
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from blockspec.errors import BlockspecError
from blockspec.cli.common import (FORCE, add_json_argument, add_plot_argument, check_output, check_plot_file,
                                  emit_json, flag_names, non_negative_int, print_table)
from blockspec.cli.model_input import add_model_arguments, subject_of
from blockspec.train.plot import PLOT_IMAGE

if TYPE_CHECKING:
    from blockspec.inspect.subject import Subject

TOP_K = 5
CHAPTER = ("SECTION: 7.1-7.6 are the sections of chapter 7, \"Transformer Architecture\", which follows one token "
           "through a transformer: the chapter behind blockspec (docs/chapter-claims.md)")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("trace", help="follow one input through the model, stage by stage",
                                   description="Follow one input through the model, stage by stage: each stage's "
                                               "shape, operation, component and chapter section.",
                                   epilog=CHAPTER + ".")
    add_model_arguments(parser)
    parser.add_argument("--stage", action="append", metavar="PATTERN",
                        help="only stages whose name matches (fnmatch, e.g. 'blocks.*.attn.weights'), with values; "
                             "repeat for several patterns")
    add_json_argument(parser)
    add_plot_argument(parser, "write the stage overview to FILE, and each other picture next to it as "
                              "STEM-NAME.SUFFIX (attention per block, positional encoding)")
    parser.add_argument("--force", action="store_true",
                        help="replace --plot and the pictures beside it if they are plot images")
    parser.add_argument("--top", type=non_negative_int, default=TOP_K, metavar="K",
                        help=f"next-token candidates to list (default {TOP_K})")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from blockspec.inspect.subject import next_tokens
    from blockspec.inspect.trace import trace

    plot = _check_plot(args)
    subject = subject_of(args)
    result = trace(subject.model, subject.input())
    stages = result.stages if args.stage is None else _matching(result, args.stage)
    plots = _plots(plot, result, subject, force=args.force)
    top = next_tokens(result, subject, args.top)
    if args.json:
        emit_json(_as_json(subject, stages, top, plots, with_values=args.stage is not None))
    else:
        _print(subject, stages, top, plots, with_values=args.stage is not None)
    return 0


def _matching(result, patterns: list[str]) -> list:
    """The stages any ``--stage`` pattern matches, in trace order; a pattern that matches none is refused."""
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(stage.name, pattern) for stage in result.stages):
            raise BlockspecError(f"--stage: no stage matches {pattern!r}; stages are named like "
                                 f"{', '.join(result.names()[:4])}, blocks.0.attn.weights, ...")
    return [s for s in result.stages if any(fnmatch.fnmatchcase(s.name, p) for p in patterns)]


def _check_plot(args: argparse.Namespace) -> Path | None:
    """--plot FILE and the pictures an earlier trace left beside it, refused before any work unless --force."""
    plot = check_plot_file(args.plot)
    if plot is None:
        return None
    from blockspec.inspect.plots import sibling_pictures

    check_output("--plot", plot, kind=PLOT_IMAGE, force=args.force, inputs=[args.spec, args.weights])
    for picture in [] if args.force else sibling_pictures(plot):  # with --force: each is checked before drawing
        check_output("--plot", picture, kind=PLOT_IMAGE, force=False)
    return plot


def _plots(plot: Path | None, result, subject: Subject, *, force: bool) -> list[str]:
    """The stage overview in FILE, then one sibling per attention layer and the positional encoding."""
    if plot is None:
        return []
    from blockspec.inspect.plots import write_plots_beside

    with flag_names(FORCE):
        return [str(p) for p in write_plots_beside(result, subject.model, plot, subject.labels, overwrite=force)]


def _stage_json(stage, with_values: bool) -> dict:
    record = {"name": stage.name, "shape": list(stage.shape), "op": stage.op, "component": stage.component,
              "distribution": stage.distribution, "section": stage.section}
    if with_values:
        record["values"] = stage.tensor[0].tolist()
    return record


def _as_json(subject: Subject, stages, top, plots, *, with_values: bool) -> dict:
    tokenizer = subject.tokenizer.describe() if subject.tokenizer else None
    return {
        "model": subject.model.spec.model.name,
        "weights": subject.weights,
        "input": {"ids": subject.ids, "tokens": subject.labels, "tokenizer": tokenizer},
        "stages": [_stage_json(s, with_values) for s in stages],
        "next_token": top,
        "plots": plots,
    }


def _print(subject: Subject, stages, top, plots, *, with_values: bool) -> None:
    n_tokens = len(subject.ids)
    print(f"{subject.model.spec.model.name}: weights {subject.weights}")
    how = subject.tokenizer.describe() if subject.tokenizer else "token ids"
    print(f"input: {''.join(subject.labels)!r} -> ids {subject.ids}  ({how}; N = {n_tokens}, batch 1 omitted)\n")
    rows = [(s.name, " x ".join(map(str, s.shape)), s.op, _provider(s), s.section) for s in stages]
    print_table(("STAGE", "SHAPE", "OP", "COMPONENT", "SECTION"), rows)
    print(f"\n{CHAPTER}")
    if with_values:
        _print_values(stages)
    if top:
        print(f"\nnext token after the last input token (top {len(top)}):")
        print_table(("TOKEN", "ID", "P"), [(f"'{t['token']}'", t["id"], f"{t['p']:.4f}") for t in top], right=(1, 2))
    for path in plots:
        print(f"wrote {path}")


def _provider(stage) -> str:
    if stage.component:
        return f"{stage.component} ({stage.distribution})"
    return f"{stage.distribution} core" if stage.distribution else "?"


def _print_values(stages: Sequence) -> None:
    import torch

    torch.set_printoptions(precision=4, sci_mode=False)  # a CLI process: the global setting is ours
    for stage in stages:
        print(f"\n{stage.name}  [{', '.join(map(str, stage.shape))}]")
        print(stage.tensor[0].cpu())
