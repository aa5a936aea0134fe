"""`blockspec tokenizer train`: learn a byte-level BPE tokenizer.json from text files."""

from __future__ import annotations

import argparse

from blockspec.cli.common import add_json_argument, emit_json, flag_names, positive_int


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("tokenizer", help="train a subword tokenizer (byte-level BPE)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    train = actions.add_parser("train", help="learn a byte-level BPE tokenizer.json from UTF-8 text files")
    train.add_argument("files", nargs="+", metavar="FILE", help="UTF-8 text files to learn from")
    train.add_argument("--vocab-size", type=positive_int, required=True, metavar="N",
                       help="tokens in all, the 256 bytes included (at least 256)")
    train.add_argument("--out", required=True, metavar="DIR", help="directory to write tokenizer.json in")
    train.add_argument("--force", action="store_true", help="replace --out if it is a tokenizer directory")
    add_json_argument(train, "a JSON summary")
    train.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from blockspec.data.textfiles import check_text_files, chunks
    from blockspec.data.tokenizer import TOKENIZER_DIRECTORY, train_bpe, write_tokenizer_directory
    from blockspec.outputs.targets import check_writable_target

    with flag_names({"overwrite": "--force"}):
        check_writable_target(args.out, kind=TOKENIZER_DIRECTORY, overwrite=args.force, inputs=args.files)
    check_text_files(args.files)
    texts = (text for path in args.files for text in chunks(path))
    with flag_names({"vocab_size": "--vocab-size"}):
        tokenizer = train_bpe(texts, args.vocab_size, source=args.files[0])
    with flag_names({"overwrite": "--force"}):
        written = write_tokenizer_directory(tokenizer, args.out, overwrite=args.force)
    summary = {"tokenizer": str(written), "vocab_size": tokenizer.vocab_size,
               "sha256": tokenizer.sha256}
    if args.json:
        emit_json(summary)
    else:
        print(f"wrote {summary['tokenizer']}: byte-level BPE, {tokenizer.vocab_size} tokens")
    return 0
