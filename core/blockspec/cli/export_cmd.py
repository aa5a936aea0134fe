"""`blockspec export-hf`: a blockspec checkpoint -> a directory transformers' from_pretrained loads."""

from __future__ import annotations

import argparse
import json

from blockspec.checkpoint.outputs import check_writable_target
from blockspec.cli.common import add_json_argument, emit_json, flag_names, registry_with_warnings

FLAGS = {"overwrite": "--force"}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("export-hf", help="export a checkpoint to the Hugging Face layout")
    parser.add_argument("checkpoint", metavar="CKPT", help="blockspec checkpoint directory")
    parser.add_argument("--out", required=True, metavar="DIR", help="directory to write")
    parser.add_argument("--force", action="store_true", help="replace DIR if it exists")
    add_json_argument(parser, "a JSON object (checkpoint, directory, files, carried)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with flag_names(FLAGS):
        check_writable_target(args.out, kind="directory", overwrite=args.force, inputs=[args.checkpoint])
        return _export(args)


def _export(args: argparse.Namespace) -> int:
    from blockspec.checkpoint.directory import load, read_checkpoint_manifest, read_extra_file
    from blockspec.errors import CheckpointError
    from blockspec.interop import export_hf
    from blockspec.interop.hf_dir import CARRIED_PREFIX

    registry = registry_with_warnings()
    model = load(args.checkpoint, registry=registry)
    names = [n for n in read_checkpoint_manifest(args.checkpoint).files if n.startswith(CARRIED_PREFIX)]
    carried = {n.removeprefix(CARRIED_PREFIX): read_extra_file(args.checkpoint, n) for n in names}
    base = None
    if "config.json" in carried:
        try:
            base = json.loads(carried.pop("config.json"))
        except ValueError as error:
            raise CheckpointError(f"{args.checkpoint}: {CARRIED_PREFIX}config.json: not valid JSON: {error}") from None
    with flag_names(FLAGS):
        export_hf(model, args.out, base_config=base, extra_files=carried, overwrite=args.force)
    if args.json:
        emit_json({"checkpoint": str(args.checkpoint), "directory": str(args.out),
                   "files": ["config.json", "model.safetensors", *sorted(carried)], "carried": sorted(carried)})
        return 0
    kept = ", ".join(sorted(carried)) or "none"
    print(f"exported {args.checkpoint} -> {args.out}  (config.json, model.safetensors; carried files: {kept})")
    return 0
