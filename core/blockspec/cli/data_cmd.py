"""`blockspec data prepare`: tokenise text files once into memory-mappable train and validation arrays."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from blockspec.cli.common import UsageError, add_json_argument, emit_json, flag_names

FORMATS = ("text", "prompt-response")
EXAMPLE_FLAGS = {"prompt_key": "--prompt-key", "response_key": "--response-key", "template": "--template"}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("data", help="prepare a tokenised dataset for `blockspec train --data DIR`")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    prepare = actions.add_parser("prepare", help="tokenise text files into train.bin, val.bin and meta.json")
    prepare.add_argument("files", nargs="+", metavar="FILE", help="UTF-8 text files, each once, in order, with the "
                         "tokenizer's end-of-text token between two (without one: a line break); the first 90%% of "
                         "the tokens train, the last 10%% validation")
    prepare.add_argument("--tokenizer", required=True, metavar="DIR|FILE",
                         help="a directory with tokenizer.json (blockspec tokenizer train, a Hugging Face model) or "
                              "that tokenizer.json, a blockspec checkpoint carrying one, or 'char' (the text's own "
                              "characters)")
    prepare.add_argument("--out", required=True, metavar="DIR", help="directory to write")
    prepare.add_argument("--format", choices=FORMATS, default="text",
                         help="text: plain text files (the default); prompt-response: JSON lines, each an object "
                              "with a prompt and a response, the loss on the response (and the end-of-text token "
                              "that ends it) only, through a loss mask per split")
    prepare.add_argument("--prompt-key", metavar="KEY", help="with --format prompt-response: the prompt's key "
                         "(default 'prompt')")
    prepare.add_argument("--response-key", metavar="KEY", help="with --format prompt-response: the response's key "
                         "(default 'response')")
    prepare.add_argument("--template", metavar="TEXT", help="with --format prompt-response: the text around them, "
                         "with {prompt} and then {response} once each (cut out, never formatted); the text up to "
                         "{response} is not scored, the rest is; default: the prompt, then the response")
    prepare.add_argument("--force", action="store_true", help="replace --out if it is a prepared dataset")
    prepare.add_argument("--quiet", action="store_true", help="no progress bar")
    add_json_argument(prepare, "the dataset's meta.json document")
    prepare.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from blockspec.data.prepared import PREPARED
    from blockspec.outputs.targets import check_writable_target
    from blockspec.sources import tokenizer_at
    from blockspec.train.progress import Progress

    check_format_flags(args)
    with flag_names({"overwrite": "--force", "template": "--template"}):
        check_writable_target(args.out, kind=PREPARED, overwrite=args.force, inputs=[*args.files, args.tokenizer])
        prepare, total = _preparation(args)
        tokenizer = tokenizer_at(args.tokenizer)
        with Progress(total=total, unit="B", scale=True, description="tokenising",
                      enabled=not (args.quiet or args.json)) as bar:  # bytes of text read so far
            meta = prepare(args.files, tokenizer, args.out, overwrite=args.force, progress=bar.advance)
    if args.json:
        emit_json(meta)
    else:
        print(_summary(args.out, meta))
    return 0


def check_format_flags(args: argparse.Namespace) -> None:
    """Refuse an example flag without ``--format prompt-response``: it would be ignored."""
    given = [flag for name, flag in EXAMPLE_FLAGS.items() if getattr(args, name) is not None]
    if given and args.format != "prompt-response":
        raise UsageError(f"{given[0]}: only applies to JSON lines of prompts and responses; add --format "
                         "prompt-response (or leave it out for plain text)")


def _preparation(args: argparse.Namespace) -> tuple[Callable[..., dict[str, Any]], int]:
    """The function that prepares the files, with its options, and the bytes it will read; every text file
    checked first (``prepare_examples`` checks every line of instruction data itself, before it writes)."""
    from functools import partial

    from blockspec.data import instruct
    from blockspec.data.prepared import prepare
    from blockspec.data.prepared_instruct import prepare_examples
    from blockspec.data.textfiles import check_text_files

    if args.format == "text":
        return prepare, check_text_files(args.files)
    template = instruct.Template() if args.template is None else instruct.parse_template(args.template)
    keys = instruct.Keys(args.prompt_key or "prompt", args.response_key or "response")
    return partial(prepare_examples, keys=keys, template=template), sum(os.path.getsize(f) for f in args.files)


def _summary(out: str, meta: dict[str, Any]) -> str:
    tokens, size = meta["tokens"], meta["bytes"]
    text = (f"wrote {out}: {tokens['train']:,} train and {tokens['val']:,} validation tokens "
            f"({size['train']:,} and {size['val']:,} bytes of text; {meta['dtype']}, {meta['vocab_size']} tokens "
            "in the vocabulary)")
    if "loss_mask" not in meta:
        return text
    mask = meta["loss_mask"]
    examples, scored = mask["examples"], mask["scored_tokens"]
    return (f"{text}; {examples['train']:,} and {examples['val']:,} examples, the loss on {scored['train']:,} and "
            f"{scored['val']:,} response tokens")
