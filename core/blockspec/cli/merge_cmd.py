"""`blockspec merge`: a model with adapters -> an ordinary checkpoint with the adapters folded into its weights."""

from __future__ import annotations

import argparse

from blockspec.checkpoint.layout import CHECKPOINT
from blockspec.errors import InputError, Problem
from blockspec.outputs.targets import check_writable_target
from blockspec.cli.common import add_json_argument, emit_json, flag_names, registry_with_warnings

FLAGS = {"overwrite": "--force"}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("merge", help="fold a model's adapters into its weights: an ordinary checkpoint")
    parser.add_argument("source", metavar="SOURCE", help="a checkpoint whose spec has [[adapters]]")
    parser.add_argument("--out", required=True, metavar="CKPT", help="checkpoint directory to write")
    parser.add_argument("--force", action="store_true", help="replace CKPT if it is an existing checkpoint")
    add_json_argument(parser, "a JSON object (source, checkpoint, merged, carried)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with flag_names(FLAGS):
        check_writable_target(args.out, kind=CHECKPOINT, overwrite=args.force, inputs=[args.source])
        return _merge(args)


def _merge(args: argparse.Namespace) -> int:
    from blockspec.assembly.merge import merge_adapters
    from blockspec.checkpoint.directory import save
    from blockspec.checkpoint.layout import carried_entries

    source, model = open_adapted(args.source, doing="merge", hint="its weights are plain already: use it as it is")
    merged = sorted(model.adapted)
    merge_adapters(model)
    extra = {"merged_from": source.path.resolve().name, "adapters": [entry.use for entry in source.spec.adapters]}
    save(model, args.out, extra=extra, extra_files=own_tokenizer(source), overwrite=args.force)  # hf/ files too
    carried = sorted(carried_entries(model.carried))
    if args.json:
        emit_json({"source": str(source.path), "checkpoint": str(args.out), "merged": merged, "carried": carried})
        return 0
    print(f"merged {source.path} -> {args.out}  ({len(merged)} adapted layers folded in; carried files: "
          f"{', '.join(carried) or 'none'})")
    return 0


def open_adapted(path: str, *, doing: str, hint: str):
    """(the source, its model) of a model source with [[adapters]]; one without is refused before its weights
    are read."""
    from blockspec.sources import open_source

    source = open_source(path, registry_with_warnings(), with_weights=True)
    if not source.spec.adapters:
        raise InputError(Problem(file=str(source.path), path="$.adapters", expected=f"[[adapters]] to {doing}",
                                 found="none", hint=hint))
    return source, source.model()


def own_tokenizer(source) -> dict[str, bytes]:
    """The source checkpoint's own tokenizer.json (a training run's), as the checkpoint file it was: the one
    rule's first step (``sources.tokenizers``); a carried one travels with ``model.carried``."""
    from blockspec.checkpoint.layout import TOKENIZER_FILE
    from blockspec.sources.tokenizers import tokenizer_file_of

    found = tokenizer_file_of(source.path, source.kind)
    return {TOKENIZER_FILE: found.data} if found is not None and found.own else {}
