"""`blockspec tokenizer train`: learn a byte-level BPE tokenizer.json from text files."""

from __future__ import annotations

import argparse

from blockspec.cli.common import add_json_argument, emit_json, flag_names, positive_int


def special_tokens(text: str) -> tuple[str, ...]:
    """--special "<|bos|>,<|eos|>" -> the tokens; '' -> none. Each is checked by the trainer (check_special)."""
    return tuple(text.split(",")) if text else ()


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("tokenizer", help="train a subword tokenizer (byte-level BPE)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    train = actions.add_parser("train", help="learn a byte-level BPE tokenizer.json from UTF-8 text files")
    train.add_argument("files", nargs="+", metavar="FILE", help="UTF-8 text files to learn from, each once (each its own document: "
                       "no merge spans two)")
    train.add_argument("--vocab-size", type=positive_int, required=True, metavar="N",
                       help="tokens in all, the 256 bytes and the special tokens included (at least 256 + one per "
                            "special token)")
    train.add_argument("--special", type=special_tokens, metavar="TOKENS",
                       help="comma-separated special tokens, never split, with the first ids (default <|endoftext|>, "
                            "GPT-2's end of text; '' for none); one named like an end of text (<|endoftext|>, </s>, "
                            "<|eos|>, ...) separates the files data prepare tokenises")
    train.add_argument("--out", required=True, metavar="DIR", help="directory to write tokenizer.json (and its tokenizer_config.json) in")
    train.add_argument("--force", action="store_true", help="replace --out if it is a tokenizer directory")
    add_json_argument(train, "a JSON summary")
    train.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from blockspec.data.textfiles import check_text_files, chunks
    from blockspec.data.tokenizer import (DEFAULT_SPECIAL, TOKENIZER_DIRECTORY, check_special, end_of_text, train_bpe,
                                          write_tokenizer_directory)
    from blockspec.outputs.targets import check_writable_target

    with flag_names({"overwrite": "--force"}):
        check_writable_target(args.out, kind=TOKENIZER_DIRECTORY, overwrite=args.force, inputs=args.files)
    special = DEFAULT_SPECIAL if args.special is None else args.special
    with flag_names({"special": "--special"}):
        check_special(special)  # before the text is read
    check_text_files(args.files)
    texts = (text for path in args.files for text in chunks(path))  # each file its own documents: no merge spans two
    with flag_names({"vocab_size": "--vocab-size"}):
        tokenizer = train_bpe(texts, args.vocab_size, special=special, source=args.files[0])
    with flag_names({"overwrite": "--force"}):
        written = write_tokenizer_directory(tokenizer, args.out, overwrite=args.force)
    ids, eos = tokenizer.special_tokens, end_of_text(tokenizer)
    summary = {"tokenizer": str(written), "vocab_size": tokenizer.vocab_size, "sha256": tokenizer.sha256,
               "special": ids, "end_of_text": eos}
    if args.json:
        emit_json(summary)
    else:
        print(f"wrote {summary['tokenizer']}: byte-level BPE, {tokenizer.vocab_size} tokens")
        print(_special_line(ids, eos))
    return 0


def _special_line(special: dict[str, int], eos: str | None) -> str:
    ids = ", ".join(f"{token} = {index}" for token, index in special.items()) or "none"
    separator = f"end of text: {eos} (between files in data prepare)" if eos else \
        "end of text: none (data prepare separates files with a line break)"
    return f"special tokens: {ids}; {separator}"
