"""`blockspec export-hf`: a blockspec checkpoint -> a directory transformers' from_pretrained loads."""

from __future__ import annotations

import argparse

from blockspec.interop.hf_layout import EXPORT
from blockspec.outputs.targets import check_writable_target
from blockspec.cli.common import add_json_argument, emit_json, flag_names, registry_with_warnings

FLAGS = {"overwrite": "--force"}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("export-hf", help="export a checkpoint to the Hugging Face layout")
    parser.add_argument("checkpoint", metavar="CKPT", help="blockspec checkpoint directory")
    parser.add_argument("--out", required=True, metavar="DIR", help="directory to write")
    parser.add_argument("--force", action="store_true",
                        help="replace DIR if it is an export (config.json, model.safetensors and the files export writes)")
    add_json_argument(parser, "a JSON object (checkpoint, directory, files, carried)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with flag_names(FLAGS):
        check_writable_target(args.out, kind=EXPORT, overwrite=args.force, inputs=[args.checkpoint])
        return _export(args)


def _export(args: argparse.Namespace) -> int:
    from blockspec.interop import export_hf
    from blockspec.interop.hf_layout import CONFIG, SAFETENSORS
    from blockspec.sources import open_source
    from blockspec.sources.hf_export_files import export_files

    source = open_source(args.checkpoint, registry_with_warnings(), with_weights=True)
    model = source.model()
    files = export_files(source, model.carried)  # what the model carries, and the checkpoint's tokenizer
    with flag_names(FLAGS):
        export_hf(model, args.out, extra_files=files, overwrite=args.force)
    written = sorted(name for name in files if name != CONFIG)
    if args.json:
        emit_json({"checkpoint": str(args.checkpoint), "directory": str(args.out),
                   "files": sorted([CONFIG, SAFETENSORS, *written]), "carried": written})
        return 0
    kept = ", ".join(written) or "none"
    print(f"exported {args.checkpoint} -> {args.out}  ({CONFIG}, {SAFETENSORS}; carried files: {kept})")
    return 0
