"""`blockspec data prepare`: tokenise text files once into memory-mappable train and validation arrays."""

from __future__ import annotations

import argparse

from blockspec.cli.common import add_json_argument, emit_json, flag_names


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
    prepare.add_argument("--force", action="store_true", help="replace --out if it is a prepared dataset")
    prepare.add_argument("--quiet", action="store_true", help="no progress bar")
    add_json_argument(prepare, "the dataset's meta.json document")
    prepare.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from blockspec.data.prepared import PREPARED, prepare
    from blockspec.outputs.targets import check_writable_target
    from blockspec.data.textfiles import check_text_files
    from blockspec.sources import tokenizer_at
    from blockspec.train.progress import Progress

    with flag_names({"overwrite": "--force"}):
        check_writable_target(args.out, kind=PREPARED, overwrite=args.force, inputs=[*args.files, args.tokenizer])
        tokenizer = tokenizer_at(args.tokenizer)
        total = check_text_files(args.files)
        with Progress(total=total, unit="B", scale=True, description="tokenising",
                      enabled=not (args.quiet or args.json)) as bar:  # bytes of text read so far
            meta = prepare(args.files, tokenizer, args.out, overwrite=args.force, progress=bar.advance)
    if args.json:
        emit_json(meta)
    else:
        tokens, size = meta["tokens"], meta["bytes"]
        print(f"wrote {args.out}: {tokens['train']:,} train and {tokens['val']:,} validation tokens "
              f"({size['train']:,} and {size['val']:,} bytes of text; {meta['dtype']}, {meta['vocab_size']} tokens "
              "in the vocabulary)")
    return 0

