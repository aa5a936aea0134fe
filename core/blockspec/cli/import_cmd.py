"""`blockspec import-hf`: a local Hugging Face model directory -> a blockspec checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path

from blockspec.checkpoint.outputs import check_writable_target
from blockspec.cli.common import add_json_argument, emit_json, flag_names, registry_with_warnings

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
        check_writable_target(args.out, kind="checkpoint", overwrite=args.force, inputs=[args.directory])
        return _import(args)


def _import(args: argparse.Namespace) -> int:
    import torch

    from blockspec.checkpoint.directory import save
    from blockspec.interop import import_hf
    from blockspec.interop.hf_dir import CARRIED_PREFIX, carried_files

    registry = registry_with_warnings()
    source = Path(args.directory)
    dtype = None if args.dtype == "keep" else getattr(torch, args.dtype)
    with flag_names(FLAGS):
        model = import_hf(source, registry=registry, allow_pickle=args.allow_pickle, dtype=dtype)
    carried = {CARRIED_PREFIX + name: data for name, data in carried_files(source).items()}
    save(model, args.out, extra={"imported_from": source.resolve().name}, extra_files=carried, overwrite=args.force)
    count = sum(p.numel() for p in model.parameters())
    dtype_name = str(next(model.parameters()).dtype).removeprefix("torch.")
    if args.json:
        emit_json({"source": str(source), "checkpoint": str(args.out), "name": model.spec.model.name,
                   "parameters": count, "dtype": dtype_name, "carried": sorted(carried)})
        return 0
    kept = ", ".join(sorted(carried)) or "none"
    print(f"imported {source} -> {args.out}  ({model.spec.model.name}: {count:,} parameters, "
          f"{next(model.parameters()).dtype}; carried files: {kept})")
    return 0
