"""`blockspec eval`: loss, perplexity and bits per byte of a model with weights on held-out text (``--data``), or
lm-evaluation-harness tasks on it (``--tasks``: ``cli/eval_tasks.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from blockspec.cli.eval_tasks import add_task_arguments, run_tasks
from blockspec.cli.common import (MEMORY_FLAGS, UsageError, add_device_argument, add_json_argument, add_memory_check_argument,
                                  emit_json, flag_names, memory_limit, positive_int, registry_with_warnings,
                                  resolve_device)

FLAGS = {"context": "--context", "stride": "--stride", "batch_size": "--batch-size", "tokenizer": "--tokenizer",
         "files": "--data", **MEMORY_FLAGS}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("eval", help="loss, perplexity and bits per byte of a model on held-out text, "
                                   "or lm-evaluation-harness tasks")
    parser.add_argument("source", metavar="SOURCE", help="a checkpoint (blockspec train or import-hf), a training "
                        "checkpoint or a Hugging Face directory: any source with weights")
    parser.add_argument("--data", action="append", metavar="FILE",
                        help="a UTF-8 text file, or a prepared dataset directory (its validation split); repeat "
                             "for several: each is scored as its own text and the figures are summed")
    parser.add_argument("--context", type=positive_int, metavar="N",
                        help="tokens per window (default: the model's context_length; at most that)")
    parser.add_argument("--stride", type=positive_int, metavar="S",
                        help="tokens a window moves by, 1..context (default: half the context); each token is "
                             "scored once, with at least context - stride + 1 tokens before it after the first window")
    parser.add_argument("--batch-size", type=positive_int, default=8, metavar="B", help="windows per forward pass "
                        "(default 8); the figure does not depend on it")
    parser.add_argument("--tokenizer", metavar="T", help="the tokenizer to read the text with, for a source without "
                        "one: a tokenizer directory, its tokenizer.json, or a model source")
    add_task_arguments(parser)
    add_device_argument(parser)
    add_memory_check_argument(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_json_argument(parser, "a JSON object (tokens, bytes, characters, loss, perplexity, bits_per_byte, "
                              "bits_per_character, context, stride, batch_size, texts)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    _check_mode(args)
    return run_tasks(args) if args.tasks else _run_text(args)


def _check_mode(args: argparse.Namespace) -> None:
    """Held-out text or harness tasks: one of them, and each mode's own flags only with it."""
    if args.tasks and args.data:
        raise UsageError("--data and --tasks: give one (held-out text, or lm-evaluation-harness tasks), not both")
    if not args.tasks and not args.data:
        raise UsageError("expected --data FILE (held-out text) or --tasks T1,T2 (lm-evaluation-harness tasks)")
    given = [flag for flag, value in (("--include-path", args.include_path), ("--limit", args.limit)) if value]
    if given and not args.tasks:
        raise UsageError(f"{given[0]}: only with --tasks")


def _run_text(args: argparse.Namespace) -> int:
    from blockspec.evaluate import evaluate_text
    from blockspec.sources import open_source
    from blockspec.train.progress import Progress

    device = resolve_device(args.device)
    with flag_names(FLAGS):
        source = open_source(args.source, registry_with_warnings(), with_weights=True)
        with Progress(total=_text_bytes(args.data), unit="B", scale=True, description="scoring",
                      enabled=not (args.quiet or args.json)) as bar, memory_limit("--batch-size or --context"):
            result = evaluate_text(source, args.data, context=args.context, stride=args.stride,
                                   batch_size=args.batch_size, tokenizer=args.tokenizer, device=device,
                                   memory_check=not args.no_memory_check, progress=bar.advance)
    if args.json:
        emit_json({"source": args.source, "data": args.data, **result.as_dict()})
    else:
        _print(result)
    return 0


def _text_bytes(paths: list[str]) -> int:
    """The bar's total: the text files' bytes (a prepared split's count as they are decoded)."""
    return sum(Path(path).stat().st_size for path in paths if Path(path).is_file())


def _print(result) -> None:
    print(f"loss          {result.loss:.4f} nats per token")
    print(f"perplexity    {result.perplexity:.4f}")
    print(f"bits per byte {result.bits_per_byte:.4f}   (bits per character {result.bits_per_character:.4f})")
    print(f"scored        {result.tokens:,} tokens of {result.bytes:,} bytes, {result.characters:,} characters "
          f"in {result.texts} text{'s' if result.texts > 1 else ''}")
    print(f"windows       context {result.context:,}, stride {result.stride:,}, batch size {result.batch_size}")
