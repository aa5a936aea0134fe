"""`blockspec import-hf`: a local Hugging Face model directory -> a blockspec checkpoint."""

from __future__ import annotations

import argparse

from blockspec.checkpoint.layout import CHECKPOINT
from blockspec.outputs.targets import check_writable_target
from blockspec.cli.common import UsageError, add_json_argument, emit_json, flag_names, registry_with_warnings

DTYPES = ("keep", "float32", "bfloat16", "float16")
FLAGS = {"allow_pickle": "opt in with --allow-pickle to read it with torch.load(weights_only=True)",
         "overwrite": "--force"}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("import-hf", help="import a Hugging Face model directory (the families: docs/interop.md)")
    parser.add_argument("directory", metavar="DIR", help="local directory with config.json and model.safetensors")
    parser.add_argument("--out", required=True, metavar="CKPT", help="checkpoint directory to write")
    parser.add_argument("--force", action="store_true", help="replace CKPT if it is an existing checkpoint")
    parser.add_argument("--dtype", choices=DTYPES, default="keep", help="convert the weights (default: keep)")
    parser.add_argument("--allow-pickle", action="store_true",
                        help="read pytorch_model.bin if there is no safetensors file (torch.load, weights_only)")
    add_json_argument(parser, "a JSON object (source, checkpoint, name, parameters, dtype, carried)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with flag_names(FLAGS):
        check_writable_target(args.out, kind=CHECKPOINT, overwrite=args.force, inputs=[args.directory])
        return _import(args)


def _import(args: argparse.Namespace) -> int:
    import torch

    from blockspec.checkpoint.directory import save
    from blockspec.checkpoint.layout import carried_entries
    from blockspec.sources import open_source

    source = open_source(args.directory, registry_with_warnings())
    if source.kind != "hf":
        raise UsageError(f"{args.directory}: is a {source.kind}, not a Hugging Face directory (with its config.json)")
    dtype = None if args.dtype == "keep" else getattr(torch, args.dtype)
    with flag_names(FLAGS):
        model = source.model(allow_pickle=args.allow_pickle, dtype=dtype)
    save(model, args.out, extra={"imported_from": source.path.resolve().name}, overwrite=args.force)  # hf/ files too
    carried = sorted(carried_entries(model.carried))
    count = sum(p.numel() for p in model.parameters())
    dtype_name = str(next(model.parameters()).dtype).removeprefix("torch.")
    if args.json:
        emit_json({"source": str(source.path), "checkpoint": str(args.out), "name": model.spec.model.name,
                   "parameters": count, "dtype": dtype_name, "carried": carried})
        return 0
    kept = ", ".join(carried) or "none"
    print(f"imported {source.path} -> {args.out}  ({model.spec.model.name}: {count:,} parameters, "
          f"{next(model.parameters()).dtype}; carried files: {kept})")
    return 0
