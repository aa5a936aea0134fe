"""`blockspec generate`: continue a prompt with a trained checkpoint, using the KV cache."""

from __future__ import annotations

import argparse
import json

from blockspec.cli.common import (MEMORY_FLAGS, UsageError, add_device_argument, add_json_argument,
                                  add_memory_check_argument, additive_penalty_float, emit_json, flag_names,
                                  memory_limit, min_p_fraction, new_token_count, non_negative_float, positive_int,
                                  print_note, print_warning, registry_with_warnings, repetition_penalty_float,
                                  resolve_device, sample_count, seed_int, top_p_fraction)
from blockspec.generation.bounds import DEFAULT_DRAFT_TOKENS, DEFAULT_NEW_TOKENS, DEFAULT_SEED, DEFAULT_TEMPERATURE

FLAGS = {"save_checkpoint": "`blockspec train --out`", "overflow": "--overflow slide",
         "max_new_tokens": "--max-new-tokens", "temperature": "--temperature", "top_k": "--top-k", "seed": "--seed",
         "stop_strings": "--stop", "stop": "--stop",
         "top_p": "--top-p", "min_p": "--min-p", "repetition_penalty": "--repetition-penalty",
         "presence_penalty": "--presence-penalty", "frequency_penalty": "--frequency-penalty", "num_samples": "--num-samples",
         "draft": "--draft", "draft_tokens": "--draft-tokens", "use_cache": "--no-cache", "compile": "--compile",
         **MEMORY_FLAGS}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("generate", help="generate text from a trained or imported checkpoint")
    parser.add_argument("checkpoint", metavar="CKPT", help="checkpoint directory written by `blockspec train --out` "
                        "or `blockspec import-hf --out`, or a Hugging Face directory")
    prompt = parser.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", action="append", metavar="TEXT", help="text to continue, in the checkpoint's "
                        "tokenizer; repeat for several prompts, continued one after another")
    prompt.add_argument("--prompt-file", metavar="FILE", help="texts to continue, one per line (UTF-8; an empty "
                        "line is refused), as if each were given with --prompt")
    prompt.add_argument("--ids", action="append", metavar="IDS", help="token ids to continue, comma-separated "
                        "(1,2,3): for a checkpoint without a tokenizer; prints ids; repeat for several prompts")
    parser.add_argument("--max-new-tokens", type=new_token_count, metavar="N", help="tokens to add (default: "
                        f"{DEFAULT_NEW_TOKENS}, or, with --overflow error, up to the context length for learned positions)")
    parser.add_argument("--temperature", type=non_negative_float, default=DEFAULT_TEMPERATURE, metavar="T",
                        help="sampling temperature, a number >= 0: 0 is greedy (a tiny one samples as greedy does), "
                             f"higher is more varied (default {DEFAULT_TEMPERATURE:g})")
    parser.add_argument("--top-k", type=positive_int, metavar="K",
                        help="sample only among the K likeliest tokens (default: all)")
    _add_filter_arguments(parser)
    parser.add_argument("--num-samples", type=sample_count, default=1, metavar="N",
                        help="continue each prompt N times, in one batch; sample i is seeded with seed + i "
                             "(default 1)")
    parser.add_argument("--seed", type=seed_int, default=DEFAULT_SEED, metavar="S", help=f"sampling seed (default {DEFAULT_SEED})")
    parser.add_argument("--overflow", choices=("slide", "error"), default="slide",
                        help="past a learned-positions context: continue over the last context_length tokens "
                        "(slide, the default) or refuse (error)")
    parser.add_argument("--stop", action="append", default=[], metavar="STRING",
                        help="end a continuation at this text (kept, with the token that completes it); "
                             "repeat for several")
    parser.add_argument("--no-eos", action="store_true",
                        help="run past the tokenizer's end-of-text token (by default generation ends there)")
    parser.add_argument("--stream", action="store_true",
                        help="print text as it is decoded (with --json: one JSON object per line and piece, "
                             "then the final object)")
    parser.add_argument("--no-cache", action="store_true", help="recompute the whole prefix each step")
    parser.add_argument("--compile", action="store_true",
                        help="decode through one compiled step over a static cache (torch.compile; CUDA graphs on "
                             "CUDA): the same tokens, faster per token; the first call compiles, for seconds")
    parser.add_argument("--draft", metavar="SOURCE", help="speculative decoding: a smaller model of the same "
                        "tokenizer (a checkpoint or a Hugging Face directory) proposes tokens the model checks in "
                        "one pass; the same output, faster when the draft guesses well")
    parser.add_argument("--draft-tokens", type=positive_int, default=DEFAULT_DRAFT_TOKENS, metavar="K",
                        help=f"tokens the draft proposes per round (default {DEFAULT_DRAFT_TOKENS})")
    add_device_argument(parser)
    add_memory_check_argument(parser)
    add_json_argument(parser, "a JSON object (model, prompt, text, new_tokens, ids, tokenizer, stop_reason); a list "
                              "of them for several prompts")
    parser.set_defaults(run=run)


def _add_filter_arguments(parser: argparse.ArgumentParser) -> None:
    """The sampling filters and penalties after --top-k, applied in Hugging Face's order (generation.processors)."""
    parser.add_argument("--top-p", type=top_p_fraction, metavar="P", help="nucleus sampling: only the likeliest "
                        "tokens whose probabilities add up to P, a number in (0, 1] (default 1: all)")
    parser.add_argument("--min-p", type=min_p_fraction, metavar="P", help="only tokens at least P times as likely "
                        "as the likeliest, P in [0, 1] (default 0: all)")
    parser.add_argument("--repetition-penalty", type=repetition_penalty_float, metavar="R", help="Hugging Face's "
                        "penalty on every token of the prompt and the text so far: a logit > 0 divided by R, < 0 "
                        "multiplied (default 1: off)")
    parser.add_argument("--presence-penalty", type=additive_penalty_float, default=0.0, metavar="X",
                        help="subtract X from the logit of every token already generated, X from -2 to 2 "
                             "(default 0: off)")
    parser.add_argument("--frequency-penalty", type=additive_penalty_float, default=0.0, metavar="X",
                        help="subtract X times its count from the logit of every token already generated, "
                             "X from -2 to 2 (default 0: off)")


def _prompts_in(path: str) -> list[str]:
    """The prompts of ``--prompt-file``: one per line, each refused as FILE:LINE when empty."""
    from blockspec.data.textfiles import read_lines

    return read_lines(path, wanted="a prompt of at least one character")


def _settings(args: argparse.Namespace, new_tokens: int, tokenizer):
    """The flags as one ``GenerationSettings``, the object ``blockspec.generate`` takes: one set of names and bounds."""
    from blockspec.generation.settings import GenerationSettings
    from blockspec.generation.stopping import end_of_text_id

    eos_id = None if args.no_eos or tokenizer is None else end_of_text_id(tokenizer)
    with flag_names(FLAGS):
        return GenerationSettings(
            max_new_tokens=new_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
            min_p=args.min_p, repetition_penalty=args.repetition_penalty, presence_penalty=args.presence_penalty,
            frequency_penalty=args.frequency_penalty, seed=args.seed, num_samples=args.num_samples,
            stop=tuple(args.stop), stop_ids=() if eos_id is None else (eos_id,), eos=eos_id is not None,
            use_cache=not args.no_cache, overflow=args.overflow, compile=args.compile)


def run(args: argparse.Namespace) -> int:
    from blockspec.sources import open_source

    device = resolve_device(args.device)
    if args.prompt_file is not None:
        args.prompt = _prompts_in(args.prompt_file)
    if args.prompt is not None and not all(args.prompt):
        raise UsageError("--prompt: expected at least one character, found an empty text")
    _check_stop_flags(args)
    with flag_names(FLAGS):
        source = open_source(args.checkpoint, registry_with_warnings(), with_weights=True)
        model, tokenizer = source.model(device=device), source.tokenizer()
        draft = None if args.draft is None else _draft(args.draft, tokenizer, device)
    _warn_unproducible(args.stop, tokenizer)
    requests = [_request(args, model, tokenizer, given, device, draft) for given in args.prompt or args.ids]
    records = []
    for batch in _batches(requests, alone=draft is not None or args.stream):  # each checked before the first runs
        for record in _continued(args, model, tokenizer, batch, draft):
            records.append(record)
            number, sample = divmod(len(records) - 1, args.num_samples)
            if args.stream and args.json:
                print(json.dumps(record), flush=True)  # the final object, one line after the pieces
            elif not args.json and not args.stream:
                _print(args, record, (number + 1, len(requests)), (sample + 1, args.num_samples))
    if args.json and not args.stream:
        emit_json(records[0] if len(records) == 1 else records)
    return 0


def _draft(path: str, tokenizer, device):
    """``--draft``'s model, refused unless its tokenizer is the model's: the same ids must mean the same text."""
    from blockspec.data.tokenizer import tokenizer_bytes
    from blockspec.sources import open_source

    source = open_source(path, registry_with_warnings(), with_weights=True)
    theirs = source.tokenizer()
    if tokenizer is not None and theirs is not None and tokenizer_bytes(theirs) != tokenizer_bytes(tokenizer):
        raise UsageError(f"--draft {path}: its tokenizer ({theirs.describe()}) is not the model's "
                         f"({tokenizer.describe()}); draft with a model trained on the same tokenizer")
    return source.model(device=device)


def _request(args: argparse.Namespace, model, tokenizer, given: str, device, draft=None):
    """A prompt as (given, ids (1, N), settings), refused now if ``generate`` would refuse it."""
    import torch

    from blockspec.generation.speculative import check_draft
    from blockspec.generation.tokens import check_request

    prompt = torch.tensor([_prompt_ids(args, tokenizer, model.spec.model.vocab_size, given)], dtype=torch.long,
                          device=device)  # (1, N)
    limit = model.positional.max_positions if args.overflow == "error" else None
    settings = _settings(args, _new_tokens(args.max_new_tokens, limit, prompt.shape[1]), tokenizer)
    with flag_names(FLAGS):
        check_request(model, prompt, settings, vocab_limit=_vocab_limit(tokenizer))
        if draft is not None:
            check_draft(model, draft, prompt, settings, draft_tokens=args.draft_tokens,
                        vocab_limit=_vocab_limit(tokenizer))
    return given, prompt, settings


def _batches(requests: list, *, alone: bool) -> list[list]:
    """The prompts as batches: one ragged batch of each run of prompts with the same settings (with
    ``--overflow error`` a prompt's default length depends on it), or each alone (a stream, a draft)."""
    batches: list[list] = []
    for request in requests:
        if batches and not alone and batches[-1][-1][2] == request[2]:
            batches[-1].append(request)
        else:
            batches.append([request])
    return batches


def _continued(args: argparse.Namespace, model, tokenizer, batch: list, draft=None) -> list[dict]:
    """A batch of prompts continued once per sample each, as ``--json`` reports them, prompt by prompt; a
    prompt's samples do not depend on the other prompts (sample i is seeded seed + i)."""
    decode = None if tokenizer is None else tokenizer.decode
    settings, prompts = batch[0][2], [prompt[0].tolist() for _, prompt, _ in batch]
    with flag_names(FLAGS), memory_limit("--max-new-tokens (or --no-cache)"):
        steps = _steps(args, model, batch[0][1] if draft is not None else prompts, settings, draft, tokenizer)
        rows = _streamed(args, steps, decode) if args.stream else _collected(steps, len(prompts) * settings.num_samples)
    records = []
    for row, new in enumerate(rows):
        given = batch[row // settings.num_samples][0]
        records.append({**_record(model, tokenizer, prompts[row // settings.num_samples], new, settings),
                        "prompt" if args.ids is None else "prompt_ids": given})
    if draft is not None:
        _report_draft(args, records[0], steps.stats)
    return records


def _steps(args: argparse.Namespace, model, prompt, settings, draft, tokenizer):
    """The decoding stream: plain, or speculative with ``--draft``."""
    from blockspec.generation.speculative import speculative_stream
    from blockspec.generation.tokens import generate_stream

    context = dict(vocab_limit=_vocab_limit(tokenizer), source=args.checkpoint, memory_check=not args.no_memory_check,
                   decode=None if tokenizer is None else tokenizer.decode)
    if draft is None:
        return generate_stream(model, prompt, settings, **context)
    return speculative_stream(model, draft, prompt, settings, draft_tokens=args.draft_tokens, draft_source=args.draft,
                              **context)


def _report_draft(args: argparse.Namespace, record: dict, stats) -> None:
    """How well the draft guessed: in the JSON record, else one line on stderr."""
    rate = stats.acceptance_rate
    record["draft"] = {"source": args.draft, "draft_tokens": args.draft_tokens, "rounds": stats.rounds,
                       "drafted": stats.drafted, "accepted": stats.accepted, "acceptance_rate": rate}
    if not args.json:
        shown = "nothing drafted" if rate is None else f"{rate:.1%} of {stats.drafted:,} drafted tokens accepted"
        print_note(f"--draft {args.draft}: {shown}, {stats.rounds:,} target passes")


def _collected(steps, n_rows: int) -> list[list[int]]:
    """Each row's new ids, from steps of (S,) tokens."""
    rows: list[list[int]] = [[] for _ in range(n_rows)]
    for step in steps:
        for row, token in zip(rows, step.tolist()):
            row.append(token)
    return rows


def _record(model, tokenizer, prompt_ids: list[int], new: list[int], settings) -> dict:
    """What ``--json`` reports of one sample: its row's ids up to its stop (the rest of a batch row is pad)."""
    from blockspec.generation.stopping import stop_reason, until_stop

    decode = None if tokenizer is None else tokenizer.decode
    eos_id = settings.stop_ids[0] if settings.eos else None
    new = until_stop(new, stop_ids=settings.stop_ids, stop_strings=settings.stop, decode=decode)
    ids = prompt_ids + new
    return {"model": model.spec.model.name, "prompt": None, "text": None if decode is None else decode(ids),
            "new_tokens": len(new), "ids": ids, "tokenizer": None if tokenizer is None else tokenizer.describe(),
            "stop_reason": stop_reason(new, eos_id=eos_id, stop_strings=settings.stop, decode=decode)}


def _streamed(args: argparse.Namespace, steps, decode) -> list[int]:
    """Each step's whole characters printed as they come (a JSON line each with --json); the new ids."""
    from blockspec.generation.streaming import TextStream

    text, new = TextStream(1, decode), []
    for step in steps:
        new.append(int(step))
        _print_piece(args, text.push(step.tolist())[0])
    _print_piece(args, text.flush()[0])
    if not args.json:
        print(flush=True)
    return [new]


def _print_piece(args: argparse.Namespace, piece: str) -> None:
    if piece and args.json:
        print(json.dumps({"piece": piece}), flush=True)
    elif piece:
        print(piece, end="", flush=True)


def _check_stop_flags(args: argparse.Namespace) -> None:
    """Refuse, in one line, what the stop and stream flags cannot do."""
    if not all(args.stop):
        raise UsageError("--stop: expected at least one character, found an empty text")
    if args.stream and args.ids is not None:
        raise UsageError("--stream: streams text, and --ids prints ids; give --prompt, or drop --stream")
    if args.stream and len(args.prompt) > 1:
        raise UsageError(f"--stream: streams one prompt, found {len(args.prompt)} prompts")
    if args.stream and args.num_samples > 1:
        raise UsageError(f"--stream: streams one text, found --num-samples {args.num_samples}; drop one of them")


def _warn_unproducible(stops: list[str], tokenizer) -> None:
    """A stop text the tokenizer cannot produce never stops generation: say so, and go on."""
    from blockspec.generation.stopping import unproducible

    if stops and tokenizer is None:
        raise UsageError("--stop: this checkpoint carries no tokenizer, so there is no text to match")
    for stop in stops:
        missing = unproducible(stop, tokenizer)
        if missing is not None:
            print_warning(f"--stop {stop!r}: the tokenizer ({tokenizer.describe()}) has no token for {missing!r}, "
                          "so it can never stop generation")


def _vocab_limit(tokenizer) -> int | None:
    """Sample only ids the tokenizer can decode."""
    return None if tokenizer is None else tokenizer.vocab_size


def _prompt_ids(args: argparse.Namespace, tokenizer, vocab_size: int, given: str) -> list[int]:
    from blockspec.data.tokenizer import parse_ids

    if args.ids is not None:
        return parse_ids(given, vocab_size)
    if tokenizer is None:
        raise UsageError(f"--prompt: {args.checkpoint} carries no tokenizer to encode text with; "
                         "give token ids with --ids 1,2,3")
    return _encoded(tokenizer, given)


def _print(args: argparse.Namespace, record: dict, prompt: tuple[int, int], sample: tuple[int, int]) -> None:
    """Text when the prompt was text, under a header when there are several texts; ids one line each for --ids.

    ``prompt`` and ``sample``: (number, of how many)."""
    if args.ids is not None:
        print(",".join(map(str, record["ids"])))
        return
    if prompt[0] > 1 or sample[0] > 1:
        print()
    header = [f"prompt {prompt[0]} of {prompt[1]}"] if prompt[1] > 1 else []
    header += [f"sample {sample[0]} of {sample[1]}"] if sample[1] > 1 else []
    if header:
        print(f"==> {', '.join(header)} <==")
    print(record["text"])


def _new_tokens(requested: int | None, max_positions: int | None, prompt_length: int) -> int:
    """The request, or by default 200 (fewer when a table that may not slide ends sooner)."""
    if requested is not None:
        return requested
    if max_positions is None:
        return DEFAULT_NEW_TOKENS
    return max(min(DEFAULT_NEW_TOKENS, max_positions - prompt_length), 0)


def _encoded(tokenizer, prompt: str) -> list[int]:
    from blockspec.data.tokenizer import TokenizerError

    try:
        return tokenizer.encode(prompt)
    except TokenizerError as error:
        raise TokenizerError(f"--prompt: {error} (the characters of the text the model was trained on)") from None
