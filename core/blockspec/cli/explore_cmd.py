"""`blockspec explore`: one self-contained HTML page to look at a trace, positions and norms."""

from __future__ import annotations

import argparse

from blockspec.cli.common import add_json_argument, check_output, emit_json
from blockspec.cli.model_input import add_model_arguments, subject_of


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("explore", help="write a self-contained HTML explorer of one input's trace")
    add_model_arguments(parser)
    parser.add_argument("--out", required=True, metavar="FILE.html", help="where to write the page")
    parser.add_argument("--force", action="store_true", help="replace --out if it is an explorer page")
    add_json_argument(parser, "a JSON object (page, bytes, stages, model, weights, input)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from blockspec.inspect.explore.export import explorer_data
    from blockspec.inspect.explore.page import EXPLORER_PAGE, write_page
    from blockspec.inspect.subject import label_of
    from blockspec.inspect.trace import trace

    check_output("--out", args.out, kind=EXPLORER_PAGE, force=args.force, inputs=[args.spec, args.weights])
    subject = subject_of(args)
    result = trace(subject.model, subject.input())
    tokenizer = subject.tokenizer.describe() if subject.tokenizer else None
    data = explorer_data(subject.model, result, ids=subject.ids, weights=subject.weights,
                         label_of=lambda i: label_of(subject.tokenizer, i), tokenizer=tokenizer)
    path = write_page(data, args.out)
    size = path.stat().st_size
    if args.json:
        emit_json({"page": str(path), "bytes": size, "stages": len(result), "model": subject.model.spec.model.name,
                   "weights": subject.weights, "input": {"ids": subject.ids, "tokenizer": tokenizer}})
        return 0
    print(f"wrote {path} ({size / 1e6:.2f} MB): {len(result)} stages of {subject.model.spec.model.name}, "
          f"weights {subject.weights}; open it in a browser (no network needed)")
    return 0
