"""The model and input arguments `blockspec trace` and `blockspec explore` share, and the subject they make."""

from __future__ import annotations

import argparse

from blockspec.cli.common import (MEMORY_FLAGS, add_device_argument, add_memory_check_argument, flag_names,
                                  registry_with_warnings, resolve_device, seed_int)

FLAGS = {"ids": "--ids", "token_ids": "token ids with --ids", "text": "--text", "weights": "--weights",
         **MEMORY_FLAGS}
# trace and explore have no --allow-pickle: a pickled Hugging Face model goes through import-hf, which has
PICKLE = {"allow_pickle": "import it with `blockspec import-hf DIR --allow-pickle --out CKPT` (torch.load, weights_only) "
          "and pass CKPT as SPEC"}


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """SPEC, --weights, --seed, --device and the input."""
    parser.add_argument("spec", metavar="SPEC", help="TOML spec file, checkpoint or Hugging Face directory")
    parser.add_argument("--weights", metavar="FILE", help="safetensors weights, or a blockspec checkpoint "
                        "directory of the same model; default: random, from --seed")
    parser.add_argument("--seed", type=seed_int, default=0, metavar="S", help="seed of the random weights (default 0)")
    add_device_argument(parser)
    add_memory_check_argument(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="input text, in the model's own tokenizer; without one, the Tiny "
                                       "Shakespeare characters for a 65-token vocabulary or UTF-8 bytes for 256 "
                                       "tokens and more, else give --ids")
    source.add_argument("--ids", help="input token ids, comma-separated: 1,2,3")


def subject_of(args: argparse.Namespace):
    """The parsed arguments' source, model and input (``blockspec.inspect.subject``), errors worded as flags."""
    from blockspec.inspect.subject import open_subject
    from blockspec.sources import open_source

    device = resolve_device(args.device)
    with flag_names({**FLAGS, **PICKLE}):
        source = open_source(args.spec, registry_with_warnings())
        return open_subject(source, text=args.text, ids=args.ids, weights=args.weights, seed=args.seed,
                            device=device, memory_check=not args.no_memory_check)
