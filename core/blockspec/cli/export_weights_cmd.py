"""`blockspec export --weights-only`: a checkpoint without the training files, for sharing or generating."""

from __future__ import annotations

import argparse

from blockspec.checkpoint.layout import CHECKPOINT
from blockspec.outputs.targets import check_writable_target
from blockspec.cli.common import add_json_argument, emit_json, flag_names, registry_with_warnings

FLAGS = {"overwrite": "--force"}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("export", help="copy a checkpoint without its optimizer state and history")
    parser.add_argument("checkpoint", metavar="CKPT", help="blockspec checkpoint directory")
    parser.add_argument("--weights-only", action="store_true", required=True,
                        help="keep the spec, weights and extra files (e.g. tokenizer.json); drop "
                             "optimizer.safetensors and training.json")
    parser.add_argument("--out", required=True, metavar="DIR", help="checkpoint directory to write")
    parser.add_argument("--force", action="store_true", help="replace DIR if it is an existing checkpoint")
    add_json_argument(parser, "a JSON object (source, checkpoint, kept, dropped)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with flag_names(FLAGS):
        check_writable_target(args.out, kind=CHECKPOINT, overwrite=args.force, inputs=[args.checkpoint])
        return _export(args)


def _export(args: argparse.Namespace) -> int:
    from blockspec.checkpoint.directory import (
        RESERVED,
        TRAINING_FILES,
        load,
        read_checkpoint_manifest,
        read_extra_file,
        save,
    )

    model = load(args.checkpoint, registry=registry_with_warnings())  # verified: spec and weights
    manifest = read_checkpoint_manifest(args.checkpoint)
    kept = [n for n in manifest.files if n not in RESERVED and n not in TRAINING_FILES]
    files = {name: read_extra_file(args.checkpoint, name) for name in kept}  # each verified against the manifest
    extra = {k: v for k, v in manifest.extra.items() if k != "format"}  # no longer a training checkpoint
    save(model, args.out, extra={**extra, "weights_only": True}, extra_files=files, overwrite=args.force)
    dropped = sorted(TRAINING_FILES & manifest.files.keys())
    if args.json:
        emit_json({"source": str(args.checkpoint), "checkpoint": str(args.out), "kept": sorted(kept), "dropped": dropped})
        return 0
    print(f"exported {args.checkpoint} -> {args.out}  (kept: {', '.join(sorted(kept)) or 'spec and weights only'}; "
          f"dropped: {', '.join(dropped) or 'nothing'})")
    return 0
